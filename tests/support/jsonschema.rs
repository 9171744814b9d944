//! JSON Schema validation by python-jsonschema (the tests' virtualenv,
//! pinned in .ci/run): for the published schemas of the node systems we
//! render for (Talos's machine configuration, Ignition, OpenShift's CRDs).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The python of the tests' virtualenv, beside moto_server.
fn python() -> PathBuf {
    super::moto::moto_server().with_file_name("python3")
}

/// The draft a schema is checked with.
#[derive(Clone, Copy, Debug)]
pub enum Draft {
    /// Talos's schemas (`"$schema": .../draft/2020-12/schema`).
    Draft202012,
    /// Ignition's schemas and Kubernetes' openAPIV3Schema, which is a
    /// subset of draft 4.
    Draft4,
}

/// The errors of `instance` against `schema`, one line each
/// (`path: message`), empty when it is valid.
pub fn errors(schema: &Value, instance: &Value, draft: Draft) -> String {
    let dir = tempfile::tempdir().unwrap();
    let schema_file = dir.path().join("schema.json");
    let instance_file = dir.path().join("instance.json");
    std::fs::write(&schema_file, serde_json::to_vec(schema).unwrap()).unwrap();
    std::fs::write(&instance_file, serde_json::to_vec(instance).unwrap()).unwrap();
    let program = r##"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
instance = json.load(open(sys.argv[2]))
cls = {"2020-12": jsonschema.Draft202012Validator, "4": jsonschema.Draft4Validator}[sys.argv[3]]
cls.check_schema(schema)
for error in cls(schema).iter_errors(instance):
    print("/".join(map(str, error.absolute_path)) + ": " + error.message[:300])
"##;
    let out = Command::new(python())
        .args(["-c", program])
        .arg(&schema_file)
        .arg(&instance_file)
        .arg(match draft {
            Draft::Draft202012 => "2020-12",
            Draft::Draft4 => "4",
        })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python-jsonschema failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `schema` with `additionalProperties: false` wherever it lists
/// `properties` and says nothing of others: what a strict decoder (the
/// kubelet's, Ignition's) does with a field it does not know. An `allOf`
/// is closed over the union of its members' properties, and the members
/// (`$ref`s into the same document) are left open, or each would refuse
/// the others' fields.
pub fn strict(schema: &Value) -> Value {
    let mut members = Vec::new();
    collect_all_of_refs(schema, &mut members);
    close(schema, schema, "#", &members)
}

fn collect_all_of_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Array(items)) = map.get("allOf") {
                out.extend(
                    items
                        .iter()
                        .filter_map(|i| i.get("$ref")?.as_str().map(str::to_string)),
                );
            }
            map.values().for_each(|x| collect_all_of_refs(x, out));
        }
        Value::Array(items) => items.iter().for_each(|x| collect_all_of_refs(x, out)),
        _ => {}
    }
}

/// The schema `$ref` names inside `root` (`#/definitions/a/definitions/b`).
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

fn property_names(root: &Value, member: &Value) -> Vec<String> {
    let member = match member.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(root, r).unwrap_or(member),
        None => member,
    };
    member
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

fn close(v: &Value, root: &Value, at: &str, open: &[String]) -> Value {
    match v {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map
                .iter()
                .map(|(k, x)| {
                    let child = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                    (k.clone(), close(x, root, &child, open))
                })
                .collect();
            if let Some(Value::Array(items)) = map.get("allOf") {
                let names: serde_json::Map<String, Value> = items
                    .iter()
                    .flat_map(|m| property_names(root, m))
                    .map(|n| (n, Value::Object(Default::default())))
                    .collect();
                out.insert("properties".into(), Value::Object(names));
                out.insert("additionalProperties".into(), Value::Bool(false));
            } else if out.contains_key("properties")
                && !out.contains_key("additionalProperties")
                && !out.contains_key("x-kubernetes-preserve-unknown-fields")
                && !open.iter().any(|r| r == at)
                && !at.ends_with("/properties")
            {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            // An allOf member written inline is open too.
            if let Some(Value::Array(items)) = out.get_mut("allOf") {
                for item in items.iter_mut() {
                    if let Some(m) = item.as_object_mut() {
                        m.remove("additionalProperties");
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| close(x, root, &format!("{at}/{i}"), open))
                .collect(),
        ),
        other => other.clone(),
    }
}
