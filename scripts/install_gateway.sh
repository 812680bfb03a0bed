#!/usr/bin/env bash
# What the gateway's tests (tests/gateway, issue 32) need beyond pip: Debian's redis-server
# (the Redis store tests start their own on a loopback port) and the npm openai package in
# tests/gateway/node (the Node client test). Never fails: those tests skip, saying why.
set -uo pipefail
cd "$(dirname "$0")/.."
did=()
if command -v redis-server >/dev/null 2>&1; then
  did+=("redis-server already there")
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
         redis-server; } >/dev/null 2>&1; then
  did+=("installed redis-server")
else
  did+=("redis-server not installed (Debian: sudo apt-get install redis-server)")
fi
if [ -d tests/gateway/node/node_modules/openai ]; then
  did+=("npm openai already there")
elif command -v npm >/dev/null 2>&1 \
    && npm install --prefix tests/gateway/node --no-audit --no-fund --loglevel=error \
       >/dev/null 2>&1; then
  did+=("installed npm openai")
else
  did+=("npm openai not installed (needs npm)")
fi
(IFS=';'; echo "${did[*]}" | sed 's/;/; /g')
