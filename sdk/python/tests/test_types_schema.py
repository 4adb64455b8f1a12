"""The dataclasses of sandboxd.types against the schemas of the contract, and those of
sandboxd.extensions against the schemas of api/extensions.yaml: the same properties under their wire
names, the same required ones; and decoding takes every property into its field."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

import pytest

import sandboxd
import sandboxd.extensions as x
import sandboxd.types as t
from sandboxd.errors import UnexpectedResponse
from conformance import DOCS, EXTENSION_KEYS, EXTENSION_OPERATIONS, OPERATIONS, operation_of, split, validator

CLASSES: List[Any] = [
    t.RuntimeCapabilities,
    t.ProviderManifest,
    t.RuntimeInfo,
    t.Resources,
    t.SandboxSpec,
    t.Endpoint,
    t.Failure,
    t.SandboxResource,
    t.CommandResult,
    t.FileReadResult,
    t.FileEntry,
    t.SandboxEvent,
    # api/extensions.yaml, a module of sandboxd.extensions per group
    x.Lifetime,
    x.SandboxStats,
    x.Volume,
    x.VolumeMount,
    x.NetworkPolicy,
    x.NetworkStatus,
    x.PreviewToken,
    x.NetworkDenial,
    x.NetworkDenialsEnd,
    x.ImageInfo,
    x.ImageList,
    x.ImageProgress,
    x.ImageRemoved,
    x.ImagePruneResult,
    x.SnapshotInfo,
    x.SnapshotList,
    x.ForkResult,
    x.TemplateVersion,
    x.TemplateInfo,
    x.TemplateList,
    x.Process,
    x.OutputDropped,
    x.RawFileWritten,
    x.UploadState,
    x.FileChange,
    x.ProcessEnd,
    x.TerminalSize,
    x.StreamHeartbeat,
]


def schema_at(pointer: str, within: str = "") -> Dict[str, Any]:
    """The schema at pointer; a "#/..." pointer is within the document named within."""
    name, at = split(pointer) if not pointer.startswith("#") else (within, pointer)
    node: Any = DOCS[name]
    for part in at[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    while "$ref" in node:
        node = schema_at(node["$ref"], name)
    return dict(node)


def doc_of(pointer: str) -> str:
    return "" if pointer.startswith("#") else split(pointer)[0]


def exclusive(schema: Dict[str, Any]) -> List[str]:
    """The properties of which a schema allows at most one (``not: {required: [a, b]}``)."""
    return list(schema.get("not", {}).get("required", []))


def sample(schema: Dict[str, Any], full: bool, within: str = "") -> Any:
    """A document of schema (of the document named within): with every property when full, else only
    the required ones."""
    while "$ref" in schema:
        schema = schema_at(schema["$ref"], within)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = typ[0]
    if typ == "object" or "properties" in schema:
        props = schema.get("properties", {})
        keep = props if full else {k: v for k, v in props.items() if k in schema.get("required", [])}
        out = {k: sample(v, full, within) for k, v in keep.items()}
        for k in exclusive(schema)[1:]:
            out.pop(k, None)  # properties the schema allows only one of: the first stays
        return out
    if typ == "array":
        return [sample(schema["items"], full, within)]
    if typ == "boolean":
        return True
    if typ == "integer":
        return 7
    if typ == "number":
        return 1.5
    if schema.get("format") == "date-time":
        return "2026-01-02T03:04:05.123456789Z"
    if schema.get("pattern") == "^/":
        return "/s"  # an absolute path
    if schema.get("pattern") == "^sha256:[0-9a-f]{64}$":
        return "sha256:" + "a" * 64  # a digest
    if schema.get("contentEncoding") == "base64":
        return "aGk="
    if schema.get("format") == "uri":
        return "http://x.example/"
    return "s"


def test_every_decoded_schema_has_a_class() -> None:
    decoded = {"RuntimeInfo", "SandboxResource", "CommandResult", "FileReadResult", "FileEntry", "SandboxEvent"}
    have = {c.schema.rsplit("/", 1)[-1] for c in CLASSES}
    assert decoded <= have


def test_every_extension_answer_and_key_has_a_class() -> None:
    # What a later group of api/extensions.yaml adds slots in the same way: each JSON schema an
    # operation the SDK has methods for answers 2xx with, and each sandboxd.* key it has a type for, is
    # the schema of a class of sandboxd.extensions, listed in CLASSES.
    doc = DOCS["extensions.yaml"]
    assert EXTENSION_OPERATIONS <= set(OPERATIONS), "an operation the SDK wraps is not in the document"
    assert EXTENSION_KEYS <= set(doc["components"]["schemas"]["SpecExtensions"]["properties"])
    want = set()
    for op, (name, p, m) in OPERATIONS.items():
        if op not in EXTENSION_OPERATIONS:
            continue
        for status, r in doc["paths"][p][m]["responses"].items():
            ref = r.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
            if status.startswith("2") and ref:
                want.add("extensions.yaml" + ref)
    for key in EXTENSION_KEYS:
        at = f"extensions.yaml#/components/schemas/SpecExtensions/properties/{key}"
        # A key that is a list of objects has the class of its items.
        want.add(at + "/items" if schema_at(at).get("type") == "array" else at)
    assert want, "api/extensions.yaml answers nothing with JSON"
    have = {c.schema for c in CLASSES}
    assert want <= have, f"no class for {sorted(want - have)}"
    for c in CLASSES:
        if doc_of(c.schema) == "extensions.yaml":
            assert c.__module__.startswith("sandboxd.extensions."), c


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: str(c.__name__))
def test_class_matches_schema(cls: Any) -> None:
    schema = schema_at(cls.schema)
    assert schema.get("additionalProperties") is not True
    fields = dataclasses.fields(cls)
    wire = {f.metadata["json"]: f for f in fields}
    assert set(wire) == set(schema["properties"]), "properties differ"
    required = {
        name
        for name, f in wire.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    if cls in (t.CommandResult, x.Process):
        # exitCode is required and may be null: a required field of an Optional type.
        assert "exitCode" in required
    assert required == set(schema.get("required", [])), "required properties differ"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: str(c.__name__))
def test_decoding_takes_every_property(cls: Any) -> None:
    schema = schema_at(cls.schema)
    within = doc_of(cls.schema)
    full = sample(schema, True, within)
    variants = [full]
    for k in exclusive(schema)[1:]:  # one variant for each of the properties only one of which may be
        v = dict(full)
        v.pop(exclusive(schema)[0])
        v[k] = sample(schema["properties"][k], True, within)
        variants.append(v)
    decoded = set()
    for doc in variants:
        assert not list(validator(cls.schema).iter_errors(doc))
        obj = cls.from_json(doc)
        decoded |= {f.name for f in dataclasses.fields(cls) if getattr(obj, f.name) is not None}
    for f in dataclasses.fields(cls):
        assert f.name in decoded, f"{f.name} not decoded from {f.metadata['json']}"
    minimal = sample(schema, False, within)
    cls.from_json(minimal)
    for name in schema.get("required", []):
        broken = {k: v for k, v in minimal.items() if k != name}
        with pytest.raises(UnexpectedResponse):
            cls.from_json(broken)


def test_spec_round_trips() -> None:
    full = sample(schema_at(t.SandboxSpec.schema), True)
    full["extensions"] = {"acme.example": {"a": 1}}
    spec = t.SandboxSpec.from_json(full)
    assert spec.to_json() == full
    assert not list(validator(t.SandboxSpec.schema).iter_errors(spec.to_json()))


def test_parse_time() -> None:
    ts = t.parse_time("2026-12-01T13:18:48.37961924Z")
    assert ts.microsecond == 379619 and ts.utcoffset() is not None and not ts.utcoffset()
    assert t.parse_time("2026-12-01T13:18:48+02:00").utcoffset().total_seconds() == 7200  # type: ignore[union-attr]
    with pytest.raises(UnexpectedResponse):
        t.parse_time("yesterday")


def test_capability_names() -> None:
    caps = t.RuntimeCapabilities.from_json(sample(schema_at(t.RuntimeCapabilities.schema), True))
    names: List[str] = caps.names()
    assert names == schema_at("#/components/schemas/CapabilityName")["enum"]


def test_lifetime_round_trips() -> None:
    full = sample(schema_at(x.Lifetime.schema), True, "extensions.yaml")
    lt = x.Lifetime.from_json(full)
    assert lt.to_json() == full
    assert not list(validator(x.Lifetime.schema).iter_errors(lt.to_json()))
    # A spec made with it carries it under its key, and that spec is what the contract takes.
    from sandboxd._common import make_spec

    spec = make_spec(
        image=None, template=None, resources=None, required_capabilities=None,
        extensions={"acme.example": 1}, client_request_id=None, lifetime=lt,
    )  # fmt: skip
    assert spec.to_json()["extensions"] == {"acme.example": 1, "sandboxd.lifetime": full}
    assert not list(validator(t.SandboxSpec.schema).iter_errors(spec.to_json()))
    assert not list(validator("extensions.yaml#/components/schemas/SpecExtensions").iter_errors(spec.to_json()["extensions"]))
    with pytest.raises(sandboxd.ValidationError):
        make_spec(
            image=None, template=None, resources=None, required_capabilities=None,
            extensions={"sandboxd.lifetime": {}}, client_request_id=None, lifetime=lt,
        )  # fmt: skip


def test_recorded_lifetime() -> None:
    assert x.RecordedLifetime.of(None) is None and x.RecordedLifetime.of({"other": 1}) is None
    rec = x.RecordedLifetime.of(
        {"sandboxd.lifetime": {"since": "2026-01-02T03:04:05Z", "ttlSeconds": 60, "expiresAt": "2026-01-02T03:05:05Z"}}
    )
    assert rec is not None and rec.ttl_seconds == 60 and rec.idle_seconds is None and not rec.resume_on_call
    assert rec.expires_at is not None and (rec.expires_at - rec.since).total_seconds() == 60
    with pytest.raises(UnexpectedResponse):
        x.RecordedLifetime.from_json({"ttlSeconds": 60})


def test_operation_of() -> None:
    assert operation_of("GET", "/v1/sandboxes/sbx_x/stats") == "getSandboxStats"
    assert operation_of("GET", "/v1/sandboxes/sbx_x") == "getSandbox"
    assert operation_of("GET", "/metrics") == "getMetrics"
    assert operation_of("DELETE", "/v1/events") is None


def test_volumes_and_network_round_trip() -> None:
    mount = x.VolumeMount.from_json(sample(schema_at(x.VolumeMount.schema), True, "extensions.yaml"))
    assert x.VolumeMount.from_json(mount.to_json()) == mount
    policy = x.NetworkPolicy.from_json(sample(schema_at(x.NetworkPolicy.schema), True, "extensions.yaml"))
    assert x.NetworkPolicy.from_json(policy.to_json()) == policy
    # The policy of a spec is the one a NetworkStatus reads back and a PUT sends.
    assert not list(validator("extensions.yaml#/components/schemas/NetworkPolicy").iter_errors(policy.to_json()))
    from sandboxd._common import make_spec

    spec = make_spec(
        image=None, template=None, resources=None, required_capabilities=None, extensions={"acme.example": 1},
        client_request_id=None, volumes=[mount, x.VolumeMount("cache", "/data", read_only=True)], network=policy,
    )  # fmt: skip
    ext = spec.to_json()["extensions"]
    assert ext["sandboxd.volumes"] == [mount.to_json(), {"name": "cache", "mountPath": "/data", "readOnly": True}]
    assert ext["sandboxd.network"] == policy.to_json() and ext["acme.example"] == 1
    assert not list(validator("extensions.yaml#/components/schemas/SpecExtensions").iter_errors(ext))
    for kw in ({"volumes": [mount]}, {"network": policy}):
        with pytest.raises(sandboxd.ValidationError):
            make_spec(
                image=None, template=None, resources=None, required_capabilities=None, client_request_id=None,
                extensions={"sandboxd.volumes": [], "sandboxd.network": {}}, **kw,  # type: ignore[arg-type]
            )  # fmt: skip
