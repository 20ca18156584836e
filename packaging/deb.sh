#!/usr/bin/env bash
# The Debian package of throng, in target/debian/: the release binary
# (stripped), throng(1) and the completions of bash, zsh and fish, which the
# binary itself writes (`throng man`, `throng completions SHELL`) next to it
# in target/release/ for the assets of [package.metadata.deb] in Cargo.toml.
# Needs cargo-deb (cargo install cargo-deb --locked). Prints the .deb's path.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-deb >/dev/null || {
  echo "cargo-deb is missing: cargo install cargo-deb --locked" >&2
  exit 1
}
cargo build --release --locked --quiet
target=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
out=$target/release
"$out/throng" man | gzip -9n > "$out/throng.1.gz"
"$out/throng" completions bash > "$out/throng.bash"
"$out/throng" completions zsh > "$out/_throng"
"$out/throng" completions fish > "$out/throng.fish"
cargo deb --no-build --strip --quiet
