"""A fake agent: posts the samples of a JSON file one heartbeat each, in order, as the
real agent would once a minute, and stops when the portal says the instance has ended.

    python fake_agent.py URL TOKEN SAMPLES.json
"""

import json
import sys
import urllib.error
import urllib.request


def main(url: str, token: str, path: str) -> int:
    with open(path) as handle:
        samples = json.load(handle)
    for sample in samples:
        request = urllib.request.Request(
            url,
            data=json.dumps({"samples": [sample]}).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status = answer.status
        except urllib.error.HTTPError as error:
            status = error.code
        sys.stdout.write(f"{sample['at']} {status}\n")
        if status in (401, 409):
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
