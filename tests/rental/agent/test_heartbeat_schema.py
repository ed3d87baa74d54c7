"""The heartbeat endpoint as the OpenAPI schema describes it (issue 10: the schema
describes every endpoint): its body, its token and its answers, held to what the view
really accepts and answers."""

import copy
import json
from datetime import timedelta

import jsonschema
import pytest
from rest_framework.test import APIClient

from rental.api.heartbeat import MAX_GPUS
from rental.api.heartbeat_schema import EXAMPLE, PATH
from tests.rental.agent.conftest import running_lease
from tests.rental.agent.test_heartbeat import iso, now, sample, send


@pytest.fixture
def schema(db):
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def validator(schema, name):
    """A JSON-schema validator for one component (OpenAPI 3.0's nullable made explicit)."""

    def plain(node):
        if isinstance(node, dict):
            node = {key: plain(value) for key, value in node.items() if key != "example"}
            if node.pop("nullable", False):
                node = {"anyOf": [node, {"type": "null"}]}
            return node
        if isinstance(node, list):
            return [plain(value) for value in node]
        return node

    document = plain({"components": schema["components"]})
    document["$ref"] = f"#/components/schemas/{name}"
    return jsonschema.Draft7Validator(document)


def test_the_schema_describes_the_heartbeat_with_its_token_and_answers(schema):
    operation = schema["paths"][PATH]["post"]
    assert operation["security"] == [{"agentToken": []}]
    assert schema["components"]["securitySchemes"]["agentToken"]["scheme"] == "bearer"
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/AgentHeartbeat"}
    assert set(operation["responses"]) == {"200", "400", "401", "409", "429", "503"}
    assert "Retry-After" in operation["responses"]["429"]["headers"]
    gpus = schema["components"]["schemas"]["AgentSample"]["properties"]["gpus"]
    assert gpus["maxItems"] == MAX_GPUS


def test_what_the_schema_allows_the_endpoint_accepts_and_answers_as_described(client, f0, schema):
    run = running_lease(f0)
    body = copy.deepcopy(EXAMPLE)
    validator(schema, "AgentHeartbeat").validate(body)
    body["samples"][0]["at"] = iso(now() - timedelta(minutes=1))
    answer = send(client, run.token, body)
    assert answer.status_code == 200
    validator(schema, "AgentHeartbeatAccepted").validate(answer.json())
    assert answer.json() == {"accepted": 1, "duplicates": 0}

    again = send(client, run.token, body)  # a replay: 409 in the Error shape
    assert again.status_code == 409 and again.json()["code"] == "replay"
    validator(schema, "Error").validate(again.json())


def test_what_the_schema_refuses_the_endpoint_refuses_on_that_field(client, f0, schema):
    run = running_lease(f0)
    too_many = {"samples": [sample(now(), *[10.0] * (MAX_GPUS + 1))]}
    errors = list(validator(schema, "AgentHeartbeat").iter_errors(too_many))
    assert errors, "the schema should refuse more GPUs than the view accepts"
    answer = send(client, run.token, too_many)
    assert answer.status_code == 400
    assert answer.json()["field"] == "samples[0].gpus"
    validator(schema, "Error").validate(answer.json())

    over = {"samples": [sample(now(), 100.5)]}
    assert list(validator(schema, "AgentHeartbeat").iter_errors(over))
    assert send(client, run.token, over).json()["field"] == "samples[0].gpus[0].utilization"

    stranger = send(client, "1.not-a-token", json.loads(json.dumps(EXAMPLE)))
    assert stranger.status_code == 401
    validator(schema, "Error").validate(stranger.json())
