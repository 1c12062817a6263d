"""The OpenAPI 3.0 description of the sidecar (``GET /openapi.json``), written out by hand so
that it says exactly what the routes accept; property-based tests fuzz the server against it."""

from __future__ import annotations

from typing import Any

__all__ = ["openapi"]

_ERROR = {"description": "refused, naming the field",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_AUTH: list[dict[str, list[str]]] = [{"bearer": []}]


def _json(ref: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


def _op(summary: str, ok: str | None, *, body: str | None = None, auth: bool = True,
        params: list[dict[str, Any]] | None = None, codes: tuple[int, ...] = ()) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "done", **(_json(ok) if ok else {})}}
    for code in (400, 413, 422, *codes) if body else codes:
        responses[str(code)] = _ERROR
    if auth:
        responses["401"] = _ERROR
        responses["403"] = _ERROR
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body:
        op["requestBody"] = {"required": True, **_json(body)}
    if auth:
        op["security"] = _AUTH
    if params:
        op["parameters"] = params
    return op


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": 256}}


_WAIT = {"name": "wait", "in": "query", "required": False,
         "schema": {"type": "number", "minimum": 0, "maximum": 300}}
_STATE = {"name": "state", "in": "query", "required": False,
          "schema": {"type": "string",
                     "enum": ["pending", "approved", "denied", "expired", "used"]}}

_SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["status", "field", "message"],
        "properties": {"status": {"type": "integer"}, "field": {"type": "string"},
                       "message": {"type": "string"}}}}},
    "Call": {"type": "object", "additionalProperties": False,
             "required": ["tool", "tool_class", "action"],
             "properties": {"tool": {"type": "string", "minLength": 1, "maxLength": 256},
                            "tool_class": {"type": "string", "minLength": 1, "maxLength": 64},
                            "action": {"type": "string", "minLength": 1, "maxLength": 64},
                            "parameters": {"type": "object"},
                            "taint": {"type": "array", "items": {"type": "string"}},
                            "token": {"type": "string", "nullable": True}}},
    "DecideRequest": {"type": "object", "additionalProperties": False, "required": ["call"],
                      "properties": {"call": {"$ref": "#/components/schemas/Call"},
                                     "run_id": {"type": "string", "minLength": 1,
                                                "maxLength": 128},
                                     "wait": {"type": "number", "minimum": 0, "maximum": 300},
                                     "approval_id": {"type": "string", "minLength": 1,
                                                     "maxLength": 256}}},
    "ExecuteRequest": {"type": "object", "additionalProperties": False, "required": ["call"],
                       "properties": {"call": {"$ref": "#/components/schemas/Call"},
                                      "run_id": {"type": "string", "minLength": 1,
                                                 "maxLength": 128}}},
    "ResultRequest": {"type": "object", "additionalProperties": False, "required": ["call_id"],
                      "properties": {"call_id": {"type": "string", "minLength": 1,
                                                 "maxLength": 256},
                                     "run_id": {"type": "string", "minLength": 1,
                                                "maxLength": 128},
                                     "status": {"type": "string",
                                                "enum": ["ok", "error", "denied"]},
                                     "output": {}, "error": {"type": "string", "nullable": True},
                                     "duration_ms": {"type": "number", "minimum": 0},
                                     "taint": {"type": "array", "items": {
                                         "type": "string", "minLength": 1, "maxLength": 64}}}},
    "ApprovalAnswer": {"type": "object", "additionalProperties": False, "required": ["approve"],
                       "properties": {"approve": {"type": "boolean"}}},
    "Empty": {"type": "object", "additionalProperties": False, "properties": {}},
    "Decision": {"type": "object", "required": ["verdict", "reasons"], "properties": {
        "verdict": {"type": "string", "enum": ["allow", "deny", "require-approval"]},
        "reasons": {"type": "array", "items": {"type": "object"}},
        "witness": {"type": "object"}, "call_id": {"type": "string"},
        "run_id": {"type": "string"}, "receipt": {"type": "object"},
        "checked_parameters": {"type": "object"}, "approval": {"type": "object"},
        "result": {"type": "object", "nullable": True}}},
    "Run": {"type": "object", "required": ["run_id"], "properties": {
        "run_id": {"type": "string"}, "violations": {"type": "array"}}},
    "Result": {"type": "object", "properties": {"run_id": {"type": "string"},
                                                "result": {"type": "object"}}},
    "Approval": {"type": "object", "required": ["id", "state"], "properties": {
        "id": {"type": "string"}, "state": {"type": "string"}}},
    "Approvals": {"type": "object", "properties": {"approvals": {
        "type": "array", "items": {"$ref": "#/components/schemas/Approval"}}}},
    "Any": {},
}


def openapi() -> dict[str, Any]:
    """The OpenAPI document."""
    paths: dict[str, Any] = {
        "/healthz": {"get": _op("liveness", "Any", auth=False)},
        "/v1/keys": {"get": _op("the receipt public key", "Any", auth=False)},
        "/v1/runs": {"post": _op("start a run", "Run", body="Empty")},
        "/v1/runs/{run_id}/end": {"post": _op("end a run; open obligations judged", "Run",
                                              params=[_path("run_id")], codes=(404,))},
        "/v1/runs/{run_id}/obligations": {"get": _op("open obligations", "Run",
                                                     params=[_path("run_id")], codes=(404,))},
        "/v1/decide": {"post": _op("decide a call (Kernel.check)", "Decision",
                                   body="DecideRequest", codes=(404,))},
        "/v1/execute": {"post": _op("decide and run a call (Kernel.mediate)", "Decision",
                                    body="ExecuteRequest", codes=(404,))},
        "/v1/results": {"post": _op("report a call's result (Kernel.report)", "Result",
                                    body="ResultRequest", codes=(404,))},
        "/v1/approvals": {"get": _op("list approvals", "Approvals", params=[_STATE],
                                     codes=(422,))},
        "/v1/approvals/{approval_id}": {
            "get": _op("an approval (long-poll with wait)", "Approval",
                       params=[_path("approval_id"), _WAIT], codes=(404, 422)),
            "post": _op("approve or deny (approver key)", "Approval", body="ApprovalAnswer",
                        params=[_path("approval_id")], codes=(404, 409))},
    }
    paths["/v1/runs"]["post"]["responses"]["201"] = paths["/v1/runs"]["post"]["responses"].pop(
        "200")
    return {"openapi": "3.0.3",
            "info": {"title": "callgate sidecar", "version": "1"},
            "paths": paths,
            "components": {"schemas": _SCHEMAS, "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"}}}}
