"""What a list of pages and API answers say, as given users: in this process, or run as
``python -m tests.integration.pages`` against whatever database DATABASE_URL names (the
backup test's restored copy). Each answer is its status, content type and body, with the
one part that differs between two requests of the same page (the CSRF token) blanked.
The other process must run with this one's DEBUG (pytest turns it off).
"""

import json
import re
import sys

# A form's hidden field, and the header htmx sends (hx-headers on the body).
CSRF = re.compile(r'(name="csrfmiddlewaretoken" value="|"X-CSRFToken": ")[^"]*(")')


def snapshot(requests: list[tuple[str, str]]) -> dict[str, str]:
    """``{"username url": "status type\\nbody"}`` for each (username, url)."""
    from django.contrib.auth import get_user_model  # Django must be set up first
    from django.test import Client

    users = get_user_model().objects
    answers = {}
    for username, url in requests:
        client = Client()
        client.force_login(users.get(username=username))
        response = client.get(url)
        body = CSRF.sub(r"\1-\2", response.content.decode())
        answers[f"{username} {url}"] = f"{response.status_code} {response['Content-Type']}\n{body}"
    return answers


if __name__ == "__main__":
    import django

    django.setup()
    print(json.dumps(snapshot([tuple(pair) for pair in json.loads(sys.argv[1])])))  # noqa: T201
