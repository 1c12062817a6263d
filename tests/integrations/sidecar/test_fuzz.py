"""Property-based fuzzing of the sidecar against its own OpenAPI document (schemathesis): on a
real server, with a real key, no request gets a 5xx and every 4xx names its field and reason."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from callgate.integrations.sidecar._openapi import openapi
from tests.integrations.sidecar.conftest import Server

# the document the server serves at /openapi.json (a test below checks they are the same)
schema = schemathesis.openapi.from_dict(openapi())


def _refusals_name_a_field(ctx: Any, response: Any, case: Any) -> bool:
    if 400 <= response.status_code < 500:
        error = response.json()["error"]
        assert error["field"] and error["message"], response.text
    return True


@schema.parametrize()
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_no_request_is_a_server_error_and_refusals_say_why(case: Any, server: Server) -> None:
    response = case.call(base_url=server.url,
                         headers={"Authorization": f"Bearer {server.key}"})
    assert response.status_code < 500, (case.path, case.body, response.text)
    _refusals_name_a_field(None, response, case)


def test_the_fuzzed_document_is_the_one_the_server_serves(server: Server) -> None:
    with server.http() as http:
        assert http.get("/openapi.json").json() == openapi()
