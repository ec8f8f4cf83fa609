#!/usr/bin/env bash
# Install code-server (the IDE of `fairpod space create --ide code-server`, docs/spaces.md) from the npm registry
# into a prefix (default .venv/code-server), with nothing fetched from GitHub.
#
# code-server's install runs `npm install` in its bundled VS Code, which builds native modules (a C++ compiler,
# Node's headers, libkrb5/libx11/libxkbfile/libsecret headers) and whose @vscode/ripgrep downloads ripgrep from
# GitHub's releases. That package first looks for the archive in its own cache
# ($TMPDIR/vscode-ripgrep-cache-<its version>/ripgrep-<rg version>-<target>.tar.gz): this script puts Debian's
# ripgrep of the same release there, in a TMPDIR of its own, so the install needs the package registries only.
#
# Usage: bash scripts/install-code-server.sh [PREFIX]     then: PREFIX/node_modules/.bin/code-server
# CODE_SERVER_VERSION overrides the release chosen for the machine's Node.js.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-.venv/code-server}
BIN="$PREFIX/node_modules/.bin/code-server"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "code-server is installed: $BIN ($("$BIN" --version 2>/dev/null | awk 'NR == 1'))"
  exit 0
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "code-server: Node.js and npm are not installed; skipped (code-server spaces cannot run here)" >&2
  exit 1
fi
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
# the release whose postinstall accepts this Node.js (code-server checks the major version)
case "${CODE_SERVER_VERSION:-node$NODE_MAJOR}" in
  node20) VERSION=4.100.3 ;;
  node*)
    echo "code-server: no release of code-server is chosen for Node.js $NODE_MAJOR here (4.100.3 runs on Node 20);" \
      "set CODE_SERVER_VERSION to one whose package.json wants Node $NODE_MAJOR; skipped" >&2
    exit 1 ;;
  *) VERSION=$CODE_SERVER_VERSION ;;
esac
case "$(uname -m)" in
  x86_64) TARGET=x86_64-unknown-linux-musl ;;
  aarch64) TARGET=aarch64-unknown-linux-musl ;;
  *) echo "code-server: no ripgrep target for $(uname -m); skipped" >&2; exit 1 ;;
esac

apt_get() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@") >/dev/null
}
if ! command -v rg >/dev/null 2>&1; then
  apt_get ripgrep || { echo "code-server: Debian's ripgrep is not installed and could not be; skipped" >&2; exit 1; }
fi
missing=()
for pkg in g++ make libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt_get "${missing[@]}" || echo "code-server: could not install ${missing[*]}; its native modules may not build" >&2
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# which @vscode/ripgrep the release's VS Code pins (its npm-shrinkwrap.json), and which ripgrep release that one
# downloads (its postinstall.js): read from the packages themselves (npm's cache keeps them for the install)
( cd "$WORK" && npm pack -q "code-server@$VERSION" >/dev/null && tar xzf code-server-*.tgz package/lib/vscode/npm-shrinkwrap.json )
RG_PKG=$(node -p 'require(process.argv[1]).packages["node_modules/@vscode/ripgrep"].version' \
  "$WORK/package/lib/vscode/npm-shrinkwrap.json")
( cd "$WORK" && npm pack -q "@vscode/ripgrep@$RG_PKG" >/dev/null && tar xzf vscode-ripgrep-*.tgz package/lib/postinstall.js )
RG_TAG=$(sed -n "s/^const VERSION = '\(.*\)';/\1/p" "$WORK/package/lib/postinstall.js")
[ -n "$RG_TAG" ] || { echo "code-server: cannot tell which ripgrep @vscode/ripgrep $RG_PKG wants; skipped" >&2; exit 1; }
RG_HAVE=$(rg --version | awk 'NR == 1 {print $2}')
case "$RG_TAG" in
  "v$RG_HAVE"*) ;;
  *) echo "code-server: @vscode/ripgrep $RG_PKG wants ripgrep $RG_TAG; Debian's is $RG_HAVE (used)" >&2 ;;
esac
mkdir -p "$WORK/tmp/vscode-ripgrep-cache-$RG_PKG" "$WORK/rg"
cp "$(command -v rg)" "$WORK/rg/rg"
tar czf "$WORK/tmp/vscode-ripgrep-cache-$RG_PKG/ripgrep-$RG_TAG-$TARGET.tar.gz" -C "$WORK/rg" rg

mkdir -p "$PREFIX"
NODEDIR=()
[ -f /usr/include/node/node.h ] && NODEDIR=(npm_config_nodedir=/usr)  # Node's headers from its package
# npm_config_yes: node-pty's postinstall runs `npx node-gyp`; unsafe_perm: code-server's postinstall asks for it
# when npm runs as root
env TMPDIR="$WORK/tmp" npm_config_yes=true npm_config_unsafe_perm=true "${NODEDIR[@]}" \
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "code-server@$VERSION"
"$BIN" --version >/dev/null
echo "code-server $VERSION installed: $BIN"
