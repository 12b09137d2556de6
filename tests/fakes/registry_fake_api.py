"""A fake Kubeflow Model Registry on loopback: the REST API of
schemas/model-registry-openapi.yaml (v1alpha3), the HTTP boundary and nothing more.

The real `model-registry` client talks to it over HTTP. Every request body is validated
against the operation's request schema from the OpenAPI document (an invalid body answers
422, as the real server's validation does), objects are kept in memory with server-assigned
ids and timestamps, and every request is recorded.
"""

from __future__ import annotations

import functools
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import yaml

from tests.fakes.fake_http import LoopbackServer, RoutedHandler, calls
from tests.schemas import schema_file

BASE = "/api/model_registry/v1alpha3"


@functools.lru_cache
def openapi() -> dict:
    return yaml.load(schema_file("model-registry-openapi.yaml").read_text(), Loader=yaml.CSafeLoader)


def _resolve(ref: str) -> dict:
    node = openapi()
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def request_schema(path: str, method: str, body: Any = None) -> dict:
    """The JSON schema of an operation's request body, its $refs resolvable. A oneOf with a
    discriminator (Artifact by artifactType) resolves to the schema the body's discriminator names,
    as an OpenAPI server does (plain JSON Schema has no discriminators)."""
    doc = openapi()
    ref = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    disc = _resolve(ref).get("discriminator")
    if disc and isinstance(body, dict):
        ref = disc["mapping"].get(body.get(disc["propertyName"]), ref)
    return {"$ref": ref, "components": doc["components"]}


def known_properties(schema: dict) -> set[str]:
    """Every property name a schema (through $ref / allOf) declares: OpenAPI composes the
    request types with allOf, where additionalProperties cannot reject unknown fields."""
    if "$ref" in schema:
        return known_properties(_resolve(schema["$ref"]))
    names = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        names |= known_properties(part)
    return names


@dataclass
class State:
    models: dict[str, dict] = field(default_factory=dict)  # id -> RegisteredModel
    versions: dict[str, dict] = field(default_factory=dict)  # id -> ModelVersion
    artifacts: dict[str, dict] = field(default_factory=dict)  # id -> ModelArtifact
    version_artifacts: dict[str, list[str]] = field(default_factory=dict)  # version id -> artifact ids
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    ids: Any = field(default_factory=lambda: itertools.count(1))
    lock: threading.Lock = field(default_factory=threading.Lock)
    tokens: list[str] = field(default_factory=list)  # Authorization headers seen

    def calls(self, method: str, pattern: str) -> list[tuple[str, str, Any]]:
        return calls(self, method, pattern)


def _error(code: int, message: str) -> tuple[int, dict]:
    return code, {"code": str(code), "message": message}


class Handler(RoutedHandler):
    routes = [
        ("_registered_models", rf"^{BASE}/registered_models()$"),
        ("_find_registered_model", rf"^{BASE}/registered_model()$"),
        ("_registered_model", rf"^{BASE}/registered_models/([^/]+)$"),
        ("_model_versions", rf"^{BASE}/model_versions()$"),
        ("_find_model_version", rf"^{BASE}/model_version()$"),
        ("_model_version", rf"^{BASE}/model_versions/([^/]+)$"),
        ("_version_artifacts", rf"^{BASE}/model_versions/([^/]+)/artifacts$"),
        ("_find_model_artifact", rf"^{BASE}/model_artifact()$"),
    ]
    state: State

    def dispatch(self, method: str) -> None:
        with self.state.lock:
            self.state.tokens.append(self.headers.get("Authorization", ""))
        super().dispatch(method)

    def _check(self, path: str, method: str, body: Any) -> str | None:
        schema = request_schema(path, method, body)
        try:
            jsonschema.validate(body, schema)
        except jsonschema.ValidationError as err:
            return f"invalid {method.upper()} {path} body: {err.message}"
        unknown = set(body) - known_properties(schema)
        if unknown:
            return f"invalid {method.upper()} {path} body: unknown field(s) {sorted(unknown)}"
        return None

    def _new(self, body: dict, **extra) -> dict:
        now = "1763769600000"
        return {
            **body,
            "id": str(next(self.state.ids)),
            "createTimeSinceEpoch": now,
            "lastUpdateTimeSinceEpoch": now,
            "customProperties": body.get("customProperties") or {},
            **extra,
        }

    def _registered_models(self, method, _, *, query, body):
        if method == "GET":
            items = list(self.state.models.values())
            return 200, {
                "items": items,
                "size": len(items),
                "pageSize": int(query.get("pageSize", 100)),
                "nextPageToken": "",
            }
        if problem := self._check(f"{BASE}/registered_models", "post", body):
            return _error(422, problem)
        if any(m["name"] == body["name"] for m in self.state.models.values()):
            return _error(409, f"registered model {body['name']!r} already exists")
        rm = self._new(body, state="LIVE")
        self.state.models[rm["id"]] = rm
        return 201, rm

    def _find_registered_model(self, method, _, *, query, body):
        for m in self.state.models.values():
            if m["name"] == query.get("name"):
                return 200, m
        return _error(404, f"no registered model found for name={query.get('name')!r}")

    def _registered_model(self, method, rid, *, query, body):
        return (200, self.state.models[rid]) if rid in self.state.models else _error(404, "not found")

    def _model_versions(self, method, _, *, query, body):
        if method == "GET":
            items = list(self.state.versions.values())
            return 200, {"items": items, "size": len(items), "pageSize": 100, "nextPageToken": ""}
        if problem := self._check(f"{BASE}/model_versions", "post", body):
            return _error(422, problem)
        parent = body["registeredModelId"]
        if parent not in self.state.models:
            return _error(404, f"registered model {parent} not found")
        if any(v["name"] == body["name"] and v["registeredModelId"] == parent for v in self.state.versions.values()):
            return _error(409, f"model version {body['name']!r} already exists")
        mv = self._new(body, state="LIVE")
        self.state.versions[mv["id"]] = mv
        return 201, mv

    def _find_model_version(self, method, _, *, query, body):
        for v in self.state.versions.values():
            if v["name"] == query.get("name") and v["registeredModelId"] == query.get("parentResourceId"):
                return 200, v
        return _error(404, "no model version found")

    def _model_version(self, method, vid, *, query, body):
        return (200, self.state.versions[vid]) if vid in self.state.versions else _error(404, "not found")

    def _version_artifacts(self, method, vid, *, query, body):
        if vid not in self.state.versions:
            return _error(404, f"model version {vid} not found")
        ids = self.state.version_artifacts.setdefault(vid, [])
        if method == "GET":
            items = [self.state.artifacts[i] for i in ids]
            return 200, {"items": items, "size": len(items), "pageSize": 100, "nextPageToken": ""}
        if problem := self._check(f"{BASE}/model_versions/{{modelversionId}}/artifacts", "post", body):
            return _error(422, problem)
        # "Creates a new instance of an Artifact if needed": a body with an id updates that artifact;
        # one without creates, and a name is unique within its version (a second one is a conflict,
        # as the server's unique constraint answers).
        if body.get("id"):
            if body["id"] not in ids:
                return _error(404, f"artifact {body['id']} not found in model version {vid}")
            self.state.artifacts[body["id"]].update(body)
            return 200, self.state.artifacts[body["id"]]
        if any(self.state.artifacts[i]["name"] == body.get("name") for i in ids):
            return _error(409, f"an artifact named {body.get('name')!r} already exists in model version {vid}")
        art = self._new(body, state="LIVE")
        self.state.artifacts[art["id"]] = art
        ids.append(art["id"])
        return 201, art

    def _find_model_artifact(self, method, _, *, query, body):
        for i in self.state.version_artifacts.get(query.get("parentResourceId", ""), []):
            if self.state.artifacts[i]["name"] == query.get("name"):
                return 200, self.state.artifacts[i]
        return _error(404, "no model artifact found")


class FakeRegistry:
    """Context manager: a running fake Model Registry; `url` is its http:// address."""

    def __enter__(self) -> "FakeRegistry":
        self.state = State()
        self.server = LoopbackServer(Handler, self.state)
        self.url = self.server.url
        return self

    def __exit__(self, *exc) -> None:
        self.server.close()
