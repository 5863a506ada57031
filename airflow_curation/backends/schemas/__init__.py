"""Validate Kubernetes manifests against real schemas, offline.

Core kinds go to ``kubernetes-validate`` (the upstream OpenAPI schemas of a Kubernetes version);
KubeRay and dask-kubernetes kinds to their CRDs' ``openAPIV3Schema`` (JSON files beside this module,
see README.md) with ``jsonschema``. Both are strict: an unknown field is an error, as the API server's
strict field validation would report it (CRD schemas allow unknown fields only where they say
``x-kubernetes-preserve-unknown-fields``).
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
DEFAULT_KUBERNETES_VERSION = "1.30"


class ManifestInvalid(ValueError):
    """A generated object does not match its schema."""


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """``{(apiVersion, kind): strict JSON schema}`` of every CRD shipped here."""
    out = {}
    for f in sorted(HERE.glob("*.json")):
        doc = json.loads(f.read_text())
        out[(f"{doc['group']}/{doc['version']}", doc["kind"])] = _strict(doc["openAPIV3Schema"])
    return out


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Close every object that lists its properties, and turn int-or-string into something jsonschema
    understands."""
    schema = copy.deepcopy(schema)

    def walk(s: Any) -> None:
        if isinstance(s, dict):
            if s.get("x-kubernetes-int-or-string"):
                s.pop("type", None)
                s.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
            if s.get("nullable") and "type" in s:
                s["type"] = [s["type"], "null"]
            if (
                "properties" in s
                and "additionalProperties" not in s
                and not s.get("x-kubernetes-preserve-unknown-fields")
            ):
                s["additionalProperties"] = False
            for v in s.values():
                walk(v)
        elif isinstance(s, list):
            for v in s:
                walk(v)

    walk(schema)
    # Every object has apiVersion/kind/metadata; some CRDs (dask) leave them out of the schema.
    props = schema.setdefault("properties", {})
    for key, kind in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object"), ("status", "object")):
        props.setdefault(key, {"type": kind})
    return schema


def validate_object(obj: dict[str, Any], kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> None:
    """Raise :class:`ManifestInvalid` with every problem found in ``obj``."""
    if not isinstance(obj, dict) or "kind" not in obj or "apiVersion" not in obj:
        raise ManifestInvalid(f"not a Kubernetes object (no apiVersion/kind): {str(obj)[:200]}")
    where = f"{obj['kind']} {obj.get('metadata', {}).get('name', '?')}"
    _check_metadata(obj, where)
    schema = crd_schemas().get((obj["apiVersion"], obj["kind"]))
    if schema is not None:
        import jsonschema

        validator = jsonschema.Draft7Validator(schema)
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
        if errors:
            raise ManifestInvalid(
                f"{where}: "
                + "; ".join(
                    f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message[:300]}" for e in errors[:10]
                )
            )
        return
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in getattr(e, "path", []))
        raise ManifestInvalid(f"{where}: {path or '<root>'}: {e.message}") from None
    except kubernetes_validate.SchemaNotFoundError as e:
        raise ManifestInvalid(
            f"{where}: no schema for {obj['apiVersion']}/{obj['kind']} in Kubernetes {kubernetes_version}: {e}"
        ) from None


def _check_metadata(obj: dict[str, Any], where: str) -> None:
    # What the API server checks beyond the OpenAPI schema and a dry run would catch.
    import re

    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name or "") or len(name) > 253:
        raise ManifestInvalid(f"{where}: metadata.name {name!r} is not a DNS-1123 subdomain")
    for k, v in (meta.get("labels") or {}).items():
        if not isinstance(v, str) or len(v) > 63 or not re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", v):
            raise ManifestInvalid(f"{where}: label {k}={v!r} is not a valid label value")
