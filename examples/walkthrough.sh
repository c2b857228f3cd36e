#!/usr/bin/env bash
# The README's curl walkthrough, runnable: register → login → me → refresh → logout.
# Usage: examples/walkthrough.sh [base URL]   (default http://127.0.0.1:8000)
set -euo pipefail
B=${1:-http://127.0.0.1:8000}
EMAIL=${EMAIL:-ann@example.com}
json() { python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$1"; }

curl -sf -X POST "$B/auth/register" -H 'Content-Type: application/json' \
     -d "{\"email\": \"$EMAIL\", \"password\": \"correct horse battery\"}"
echo
TOKENS=$(curl -sf -X POST "$B/auth/login" -H 'Content-Type: application/json' \
     -d "{\"email\": \"$EMAIL\", \"password\": \"correct horse battery\"}")
ACCESS=$(echo "$TOKENS" | json access_token)
REFRESH=$(echo "$TOKENS" | json refresh_token)

curl -sf "$B/auth/me" -H "Authorization: Bearer $ACCESS"
echo
TOKENS=$(curl -sf -X POST "$B/auth/refresh" -H 'Content-Type: application/json' \
     -d "{\"refresh_token\": \"$REFRESH\"}")
REFRESH=$(echo "$TOKENS" | json refresh_token)
echo "refreshed: new refresh token issued"

curl -sf -X POST "$B/auth/logout" -H 'Content-Type: application/json' \
     -d "{\"refresh_token\": \"$REFRESH\"}"
echo
# The session is over: the access token is refused at once.
test "$(curl -s -o /dev/null -w '%{http_code}' "$B/auth/me" -H "Authorization: Bearer $ACCESS")" = 401
echo "access token refused after logout"
