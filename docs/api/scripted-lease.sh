#!/usr/bin/env bash
# A scripted lease: make a token, ask for GPUs, wait until they run, print the SSH
# command, end the lease. Needs curl and python3 (to read JSON). The defaults are the
# demo's (make run): erik, engineer in the project "vision".
set -euo pipefail
PORTAL=${PORTAL:-http://127.0.0.1:8000}
PORTAL_USER=${PORTAL_USER:-erik}
PORTAL_PASSWORD=${PORTAL_PASSWORD:-demo-erik}
PROJECT=${PROJECT:-vision}
MODEL=${MODEL:-L4 24GB}
json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }

# 1. A personal token, valid 30 days. A password is accepted on this endpoint only;
#    keep the token as you would a password (it is shown once).
expires=$(python3 -c 'import datetime as d; print((d.datetime.now(d.UTC) + d.timedelta(days=30)).isoformat())')
TOKEN=$(curl -sSf -u "$PORTAL_USER:$PORTAL_PASSWORD" -H 'Content-Type: application/json' \
  -d "{\"name\": \"pipeline-$$\", \"expires_at\": \"$expires\"}" "$PORTAL/api/v1/tokens" | json '["token"]')
auth=(-H "Authorization: Bearer $TOKEN")

# 2. One GPU for two hours.
model=$(curl -sSf "${auth[@]}" -G --data-urlencode "name=$MODEL" "$PORTAL/api/v1/gpu-models" \
  | json '["results"][0]["id"]')
lease=$(curl -sSf "${auth[@]}" -H 'Content-Type: application/json' "$PORTAL/api/v1/leases" -d \
  "{\"project\": \"$PROJECT\", \"gpu_model\": $model, \"gpu_count\": 1, \"duration_hours\": \"2\", \"purpose\": \"nightly fine-tune\"}" \
  | json '["id"]')
echo "lease $lease requested"

# 3. Wait until it runs (a refusal is a 4xx with a reason; a request beyond the
#    project's limits waits for a manager: pending_approval).
while true; do
  status=$(curl -sSf "${auth[@]}" "$PORTAL/api/v1/leases/$lease" | json '["status"]')
  case $status in
    active) break ;;
    pending_approval | queued | scheduled | provisioning) sleep 3 ;;
    *) echo "lease $lease is $status" >&2; exit 1 ;;
  esac
done

# 4. How to reach it.
curl -sSf "${auth[@]}" "$PORTAL/api/v1/leases/$lease" | json '["instances"][0]["connection"]["ssh"]'

# 5. … run the work, then end the lease (billing stops when the instance is gone).
curl -sSf "${auth[@]}" -X POST "$PORTAL/api/v1/leases/$lease/end" | json '["status"]'
