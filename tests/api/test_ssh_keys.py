"""``/api/v1/ssh-keys``: the caller's own keys, checked (type, length) and fingerprinted
when added (``keys.add_ssh_key``); nobody else's key is visible or deletable."""

import base64
import hashlib
import struct

import pytest

from portal.models import AuditEvent
from rental.models import SshKey
from tests.api.catalog_support import HUGE, NOT_JSON, client_for, counts, post_raw

pytestmark = pytest.mark.django_db

LIST = "/api/v1/ssh-keys"


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def ed25519(seed: bytes, comment: str = "me@laptop") -> str:
    blob = _string(b"ssh-ed25519") + _string((seed * 32)[:32])
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def rsa(bits: int) -> str:
    modulus = b"\x00" + b"\xc5" + b"\x01" * (bits // 8 - 1)  # top bit set: ``bits`` bits
    blob = _string(b"ssh-rsa") + _string(b"\x01\x00\x01") + _string(modulus)
    return f"ssh-rsa {base64.b64encode(blob).decode()} build@ci"


def fingerprint(public_key: str) -> str:
    digest = hashlib.sha256(base64.b64decode(public_key.split()[1])).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def test_it_adds_a_key_and_answers_its_type_size_and_fingerprint(f0):
    key = rsa(4096)
    answer = client_for(f0.alice).post(LIST, {"name": "ci", "public_key": key}, format="json")
    assert answer.status_code == 201, answer.content
    row = SshKey.objects.get()
    assert answer.json() == {
        "id": row.pk,
        "name": "ci",
        "type": "ssh-rsa",
        "bits": 4096,
        "fingerprint": fingerprint(key),
        "public_key": key,
        "created_at": answer.json()["created_at"],
    }
    assert row.user == f0.alice
    assert AuditEvent.objects.get(verb="ssh_key.added").source == "api"
    listed = client_for(f0.alice).get(LIST).json()["results"]
    assert [(k["name"], k["type"], k["bits"]) for k in listed] == [("ci", "ssh-rsa", 4096)]


def test_it_shows_and_deletes_only_the_callers_own_keys(f0):
    mine = SshKey.objects.create(user=f0.alice, name="laptop", public_key=ed25519(b"a"))
    theirs = SshKey.objects.create(user=f0.bob, name="bob's", public_key=ed25519(b"b"))
    rows = client_for(f0.alice).get(LIST).json()["results"]
    assert [(k["id"], k["type"], k["bits"]) for k in rows] == [(mine.pk, "ssh-ed25519", None)]
    for who in (f0.alice, f0.admin, f0.alpha_manager):
        assert client_for(who).get(f"{LIST}/{theirs.pk}").status_code == 404
        assert client_for(who).delete(f"{LIST}/{theirs.pk}").status_code == 404
    assert client_for(None).get(LIST).status_code == 401
    assert client_for(f0.alice).delete(f"{LIST}/{mine.pk}").status_code == 204
    assert list(SshKey.objects.values_list("pk", flat=True)) == [theirs.pk]
    event = AuditEvent.objects.get(verb="ssh_key.deleted")
    assert (event.source, event.before) == ("api", {"name": "laptop"})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "private", "public_key": "-----BEGIN OPENSSH PRIVATE KEY-----"}, "public_key"),
        ({"name": "huge", "public_key": "ssh-ed25519 " + HUGE}, "public_key"),
        ({"name": "", "public_key": ed25519(b"c")}, "name"),
        ({"name": "x" * 61, "public_key": ed25519(b"c")}, "name"),
        ({"name": "n\x00ul", "public_key": ed25519(b"c")}, "name"),
        ({"name": "list", "public_key": [ed25519(b"c")]}, "public_key"),
        ({"public_key": ed25519(b"c")}, "name"),
    ],
)
def test_it_answers_400_naming_the_field_and_writes_nothing(f0, body, field):
    before = counts()
    answer = client_for(f0.alice).post(LIST, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]
    assert counts() == before


@pytest.mark.parametrize(
    ("public_key", "code"),
    [
        (rsa(1024), "weak_key"),
        ("ssh-ed25519 not-base64!", "malformed_key"),
    ],
)
def test_it_answers_409_to_a_key_shaped_text_whose_key_is_refused(f0, public_key, code):
    """Shaped like an OpenSSH key, but too weak or its body is not a key."""
    before = counts()
    answer = client_for(f0.alice).post(
        LIST, {"name": "refused", "public_key": public_key}, format="json"
    )
    assert answer.status_code == 409, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == (code, "public_key")
    assert "errors" not in answer.json()
    assert counts() == before


def test_it_refuses_a_key_or_a_name_twice_and_a_body_that_is_not_json(f0):
    client = client_for(f0.alice)
    key = ed25519(b"d")
    assert client.post(LIST, {"name": "one", "public_key": key}, format="json").status_code == 201
    again = client.post(LIST, {"name": "two", "public_key": key}, format="json")
    assert again.status_code == 409
    assert (again.json()["code"], again.json()["field"]) == ("key_taken", "public_key")
    same_name = client.post(LIST, {"name": "one", "public_key": ed25519(b"e")}, format="json")
    assert same_name.status_code == 409
    assert (same_name.json()["code"], same_name.json()["field"]) == ("name_taken", "name")
    assert post_raw(client, LIST, NOT_JSON).status_code == 400
    assert SshKey.objects.count() == 1


def test_it_lists_keys_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    SshKey.objects.create(user=f0.alice, name="k0", public_key=ed25519(b"0"))
    client = client_for(f0.alice)
    with django_assert_num_queries(2):  # count, page
        assert len(client.get(LIST).json()["results"]) == 1
    for n in range(1, 15):
        SshKey.objects.create(user=f0.alice, name=f"k{n}", public_key=ed25519(bytes([n])))
    client = client_for(f0.alice)
    with django_assert_num_queries(2):
        assert len(client.get(LIST).json()["results"]) == 15
