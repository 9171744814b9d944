//! A fake of Quay's robot account federation, from Quay's source
//! (`endpoints/oauth/robot_identity_federation.py`, `process_federated_auth`):
//! `GET /oauth2/federation/robot/token` with `Authorization: Basic
//! base64("<org>+<robot>:<JWT>")`, no body, answered with
//! `{"token": "<robot JWT>"}` whose `sub` is the robot name, or with
//! `401 {"error": "<reason>"}`. The token is checked against the robot's
//! federation entry (issuer, subject) as Quay does.

use serde_json::json;

use super::http_server::{Request, Response};
use super::token_service::{FakeService, State, Trust};

pub const PATH: &str = "/oauth2/federation/robot/token";

pub fn error(status: u16, reason: &str) -> Response {
    Response::json(status, json!({ "error": reason }))
}

/// A Quay whose only federated robot is `robot`, trusting `trust`.
pub fn start(trust: Trust, robot: &'static str) -> FakeService {
    FakeService::start("Quay", trust, move |state, req| handle(state, robot, req))
}

fn handle(state: &State, robot: &str, req: &Request) -> Response {
    state.check_line(req, "GET", PATH, true);
    if !req.body.is_empty() {
        state.violation("a body on the GET");
    }
    if req.header("content-type").is_some() {
        state.violation("a Content-Type on the GET");
    }
    let Some((username, jwt)) = req.basic_auth() else {
        state.violation("no Basic Authorization header");
        return error(401, "missing auth");
    };
    if let Some(answer) = state.scripted() {
        return answer;
    }
    if username != robot {
        return error(401, "Invalid robot");
    }
    if let Err(why) = state.verify_subject_token(&jwt) {
        return error(401, &format!("Invalid federated token: {why}"));
    }
    Response::json(200, json!({ "token": state.mint(robot) }))
}
