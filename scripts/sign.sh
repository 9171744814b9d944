#!/usr/bin/env bash
# Signs a release directory: writes SHA256SUMS over every file in it, the
# release key's public half (wi-credential-provider-release.pub) and
# SHA256SUMS.sig, an SSH signature (`ssh-keygen -Y sign`, namespace
# wi-credential-provider-release) over SHA256SUMS. Why SSH signatures, and
# how a user verifies them: docs/release.md.
#
#   WICP_RELEASE_KEY=PATH scripts/sign.sh DIST
#
# WICP_RELEASE_KEY is the releaser's SSH private key, or the public key of
# one held by ssh-agent or a hardware token (ssh-keygen signs through the
# agent then). Without it the release is signed with a throwaway key made
# here, which proves nothing to anyone else: said loudly, and the key's
# public half is still written so that the signature can be checked.
set -euo pipefail

[ "$#" -eq 1 ] || { echo "usage: WICP_RELEASE_KEY=PATH scripts/sign.sh DIST" >&2; exit 2; }
dist=$1
namespace=wi-credential-provider-release
command -v ssh-keygen >/dev/null || { echo "sign: needs ssh-keygen (apt-get install openssh-client)" >&2; exit 1; }
[ -d "$dist" ] || { echo "sign: $dist is not a directory" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
key=${WICP_RELEASE_KEY:-}
if [ -z "$key" ]; then
  key=$work/throwaway
  ssh-keygen -q -t ed25519 -N '' -C "throwaway key of an unofficial build" -f "$key"
  echo "sign: WARNING: WICP_RELEASE_KEY is not set; $dist is signed with a throwaway key that nobody can vouch for. Set WICP_RELEASE_KEY to the release key for a release others verify." >&2
fi
[ -f "$key" ] || { echo "sign: WICP_RELEASE_KEY $key is not a file" >&2; exit 1; }

# The public half: from a .pub file as it is, else derived from the
# private key (which must not need a passphrase prompt here).
public=$dist/$namespace.pub
if grep -qE '^(ssh-|sk-|ecdsa-)' "$key"; then
  awk 'NF >= 2 { print $1, $2, "'"$namespace"'"; exit }' "$key" > "$public"
else
  ssh-keygen -y -f "$key" | awk '{ print $1, $2, "'"$namespace"'" }' > "$public"
fi

rm -f "$dist/SHA256SUMS" "$dist/SHA256SUMS.sig"
(
  cd "$dist"
  find . -maxdepth 1 -type f ! -name SHA256SUMS ! -name SHA256SUMS.sig -printf '%f\n' |
    LC_ALL=C sort | xargs -d '\n' sha256sum > "$work/SHA256SUMS"
)
mv "$work/SHA256SUMS" "$dist/SHA256SUMS"
ssh-keygen -q -Y sign -f "$key" -n "$namespace" "$dist/SHA256SUMS"

# Checked as a user checks it (docs/release.md), before anyone else does.
printf '%s namespaces="%s" %s\n' "$namespace" "$namespace" "$(awk '{ print $1, $2 }' "$public")" > "$work/allowed_signers"
ssh-keygen -Y verify -f "$work/allowed_signers" -I "$namespace" -n "$namespace" \
  -s "$dist/SHA256SUMS.sig" < "$dist/SHA256SUMS" >/dev/null
(cd "$dist" && sha256sum --quiet --strict -c SHA256SUMS)
echo "sign: $dist/SHA256SUMS ($(wc -l < "$dist/SHA256SUMS") files) signed by $(ssh-keygen -l -f "$public")"
