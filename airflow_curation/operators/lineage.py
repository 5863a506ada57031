"""OpenLineage for the stage launch tasks: what each stage reads and writes, as lake datasets.

raw input -> ``<partition>/shards`` (ingest) -> ``<partition>/attrs/<stage>`` (preprocess, dedup, enrich)
-> the curated view ``<partition>`` (validate, with its checks as data-quality facets). Used only when
``apache-airflow-providers-openlineage`` is installed; the names follow OpenLineage's naming (``file`` +
path for local files, ``s3://bucket`` + key for objects).
"""

from __future__ import annotations

from typing import Any

#: Where each stage writes, under the run's partition; a stage not listed writes ``attrs/<stage>``.
STAGE_OUTPUTS = {"ingest": "shards"}


def ol_name(uri: str) -> tuple[str, str]:
    """OpenLineage (namespace, name) of a lake URI or local path.

    :param uri: a local path, ``file://`` URL or object-store URL.
    """
    if "://" not in uri or uri.startswith("file://"):
        return "file", uri.removeprefix("file://")
    scheme, rest = uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    return f"{scheme}://{bucket}", key


def partition_of(manifest_uri: str) -> str:
    """The partition a manifest belongs to (``.../snapshot=<ds>`` before ``/_manifests/``).

    :param manifest_uri: a stage run's manifest.
    """
    return manifest_uri.rsplit("/_manifests/", 1)[0]


def stage_datasets(
    stage: str,
    manifest_uri: str,
    *,
    inputs: list[str] | None = None,
    input_manifest: str | None = None,
    output_name: str | None = None,
) -> tuple[list[str], list[str]]:
    """The URIs a stage run reads and writes.

    :param stage: the stage's name.
    :param manifest_uri: this run's manifest (locates the output partition).
    :param inputs: raw inputs (ingest).
    :param input_manifest: the upstream manifest (the other stages read its partition's shards).
    :param output_name: the output folder's name under ``attrs/`` (enrich: ``enrich-<name>``).
    """
    out_base = partition_of(manifest_uri)
    output = STAGE_OUTPUTS.get(stage) or f"attrs/{output_name or stage}"
    if inputs:
        read = list(inputs)
    elif input_manifest:
        read = [f"{partition_of(input_manifest)}/shards"]
    else:
        read = []
    return read, [f"{out_base}/{output}"]


class StageLineageMixin:
    """``get_openlineage_facets_on_complete`` for a stage launch task (after it submitted its job)."""

    def _lineage_uris(self) -> tuple[list[str], list[str]] | None:
        handle = getattr(self, "_handle", None) or {}
        manifest_uri = handle.get("manifest_uri")
        if not manifest_uri:
            return None
        inputs = getattr(self, "inputs", None)
        if isinstance(inputs, str):
            inputs = [p.strip() for p in inputs.split(",") if p.strip()]
        output_name = None
        if self.stage == "enrich":
            output_name = f"enrich-{getattr(self, 'name', None) or getattr(self, 'task', None) or 'enrich'}"
        return stage_datasets(
            self.stage,
            manifest_uri,
            inputs=inputs or None,
            input_manifest=getattr(self, "input_manifest", None) or None,
            output_name=output_name,
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs and outputs of the stage run this task launched (none when it launched nothing)."""
        from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset
        from airflow.providers.openlineage.extractors import OperatorLineage

        uris = self._lineage_uris()
        if uris is None:
            return OperatorLineage()
        read, written = uris
        return OperatorLineage(
            inputs=[InputDataset(*ol_name(u)) for u in read], outputs=[OutputDataset(*ol_name(u)) for u in written]
        )
