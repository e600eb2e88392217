#!/usr/bin/env bash
# Installs the JavaScript peers (pinned in package-lock.json) and writes their outputs to
# tools/peers/out for the parity tests. Node.js and npm come from Debian when missing.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: nodejs npm"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm \
    >/dev/null
fi
# Reinstalls only when the lock file changed since the last install.
if ! cmp -s package-lock.json node_modules/.installed-lock.json 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock.json
fi
mkdir -p out
node tokenize.mjs out
for script in render_templates.mjs; do
  [ -f "$script" ] && node "$script" out
done
