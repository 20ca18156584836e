#!/usr/bin/env bash
# The Debian package of throng, in target/debian/: the release binary
# (stripped), throng(1) and the completions of bash, zsh and fish, which the
# binary itself writes (`throng man`, `throng completions SHELL`) next to it
# for the assets of [package.metadata.deb] in Cargo.toml. Prints the .deb's
# path.
#
# The binary is built against glibc 2.28 (cargo-zigbuild, zig as the
# linker), so that it runs on the load hosts users have: Debian 10 and
# newer, RHEL 8 and newer, Amazon Linux 2023; the default build needs the
# glibc of the machine that built it (2.35 here). The check below refuses a
# binary that needs more. Needs cargo-deb and cargo-zigbuild (cargo install
# cargo-deb cargo-zigbuild --locked) and zig (on PATH, or PyPI's ziglang in
# the python3 on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

glibc=2.28
triple=x86_64-unknown-linux-gnu
missing() {
  echo "packaging/deb.sh: $1 is missing: $2" >&2
  exit 1
}
command -v cargo-deb >/dev/null || missing cargo-deb "cargo install cargo-deb --locked"
command -v cargo-zigbuild >/dev/null || missing cargo-zigbuild "cargo install cargo-zigbuild --locked"
command -v zig >/dev/null || python3 -c 'import ziglang' 2>/dev/null ||
  missing zig "python3 -m venv /opt/zig && /opt/zig/bin/pip install ziglang, then PATH=/opt/zig/bin:\$PATH"
[ "$(uname -m)" = x86_64 ] || {
  echo "packaging/deb.sh: builds for x86-64 only (this machine is $(uname -m))" >&2
  exit 1
}

cargo zigbuild --release --locked --quiet --target "$triple.$glibc"
target=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
out=$target/$triple/release
# The highest glibc symbol version the binary asks for (objdump from
# binutils; versions compared as versions: 2.28 < 2.3x).
need=$(objdump -T "$out/throng" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
[ "$(printf '%s\n%s\n' "$need" "$glibc" | sort -V | tail -1)" = "$glibc" ] || {
  echo "packaging/deb.sh: $out/throng needs GLIBC_$need, more than the $glibc asked" >&2
  exit 1
}
"$out/throng" man | gzip -9n > "$out/throng.1.gz"
"$out/throng" completions bash > "$out/throng.bash"
"$out/throng" completions zsh > "$out/_throng"
"$out/throng" completions fish > "$out/throng.fish"
cargo deb --no-build --strip --quiet --target "$triple"
