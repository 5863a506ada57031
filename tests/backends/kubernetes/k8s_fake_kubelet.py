"""Plays the Job controller and the kubelet for the loopback API server: runs the containers of a
Job that the backend created, as local processes, exactly as their pod spec says (argv with
``$(VAR)`` expansion, env, ``envFrom`` Secrets, the spec ConfigMap mounted as a file), one pod per
completion index, then writes the Job's status as the controller would (podFailurePolicy included).

This is what proves that the objects the backend generates run the real job command end to end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from k8s_fake_apiserver import FakeKubernetes

from airflow_curation.backends.k8s_objects import LABEL_JOB, SPEC_DIR


class FakeKubelet:
    def __init__(self, fake: FakeKubernetes, workdir: Path, namespace: str = "default") -> None:
        self.fake, self.workdir, self.namespace = fake, workdir, namespace

    def _mount_config_map(self, name: str) -> Path:
        cm = self.fake.get("configmaps", name, self.namespace)
        assert cm is not None, f"ConfigMap {name} not found: the pod would stay ContainerCreating"
        target = self.workdir / name
        target.mkdir(parents=True, exist_ok=True)
        for key, text in cm["data"].items():
            (target / key).write_text(text)
        return target

    def _env(self, container: dict, index: int | None) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)}
        for ref in container.get("envFrom", []):
            secret = self.fake.get("secrets", ref["secretRef"]["name"], self.namespace)
            assert secret is not None, f"Secret {ref['secretRef']['name']} not found"
            env.update(secret.get("stringData", {}))
        env.update({e["name"]: e["value"] for e in container.get("env", [])})
        if index is not None:
            env["JOB_COMPLETION_INDEX"] = str(index)
        env["HOME"] = str(self.workdir)  # /tmp is an emptyDir in the pod
        return env

    def run_job(self, name: str, kill: frozenset[int] = frozenset()) -> list[int]:
        """Run every pod of Job ``name`` to its end; return the exit codes by index. Pods whose index
        is in ``kill`` die before doing anything (OOM-killed, node lost: exit 137)."""
        job = self.fake.get("jobs", name, self.namespace)
        spec = job["spec"]
        pod = spec["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "spec")
        mounted = self._mount_config_map(volume["configMap"]["name"])
        indexed = spec.get("completionMode") == "Indexed"
        codes = []
        for index in range(spec["completions"]):
            container = pod["containers"][0]
            env = self._env(container, index if indexed else None)
            argv = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in container["command"]]
            argv = [a.replace(SPEC_DIR, str(mounted)) for a in argv]
            if argv[0] == "python":
                argv[0] = sys.executable
            if index in kill:
                proc = subprocess.CompletedProcess(argv, 137, "", "Killed\n")
            else:
                proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
            codes.append(proc.returncode)
            pod_name = f"{name}-{index}"
            self.fake.add_pod(
                pod_name,
                {**job["metadata"]["labels"], LABEL_JOB: job["metadata"]["labels"][LABEL_JOB]},
                {"stage": proc.stdout + proc.stderr},
                ns=self.namespace,
            )
        self.fake.set_status("jobs", name, self._job_status(spec, codes), ns=self.namespace)
        return codes

    @staticmethod
    def _job_status(spec: dict, codes: list[int]) -> dict:
        failed = [i for i, c in enumerate(codes) if c != 0]
        status = {"succeeded": len(codes) - len(failed), "failed": len(failed), "active": 0}
        rules = spec.get("podFailurePolicy", {}).get("rules", [])
        for rule in rules:
            on = rule.get("onExitCodes")
            if rule["action"] == "FailJob" and on and any(codes[i] in on["values"] for i in failed):
                status["conditions"] = [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "PodFailurePolicy",
                        "message": f"Container {on['containerName']} failed with exit code "
                        f"{[codes[i] for i in failed][0]}",
                    }
                ]
                return status
        if failed:
            if spec.get("completionMode") == "Indexed":
                status["failedIndexes"] = ",".join(map(str, failed))
            status["conditions"] = [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "FailedIndexes" if "backoffLimitPerIndex" in spec else "BackoffLimitExceeded",
                }
            ]
        else:
            status["conditions"] = [{"type": "Complete", "status": "True"}]
        return status


class AutoKubelet(FakeKubelet):
    """Runs every Job as soon as it is created, in a background thread (a cluster that just works)."""

    def __enter__(self) -> "AutoKubelet":
        import threading

        self._stop = threading.Event()
        self._seen: set[str] = set()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            # No Dask or KubeRay operator here: fail those at once rather than let a DAG wait forever.
            for plural, status in (
                ("daskjobs", {"jobStatus": "Failed"}),
                ("rayjobs", {"jobDeploymentStatus": "Failed", "message": "no KubeRay here"}),
            ):
                for name in self.fake.names(plural, self.namespace):
                    if name not in self._seen:
                        self._seen.add(name)
                        self.errors.append(RuntimeError(f"{plural} {name} cannot run in this test"))
                        self.fake.set_status(plural, name, status, ns=self.namespace)
            for name in self.fake.names("jobs", self.namespace):
                if name not in self._seen:
                    self._seen.add(name)
                    try:
                        self.run_job(name)
                    except BaseException as e:  # noqa: BLE001 - surfaced by the test
                        self.errors.append(e)
            self._stop.wait(0.05)
