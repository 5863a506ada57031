"""The real ``kubernetes`` client's create / poll / cancel / logs / watch flow against a Kubernetes API
server on loopback (see k8s_fake_apiserver.py), with the tests playing the controllers."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from airflow_curation.backends.base import JobState
from airflow_curation.backends.k8s_objects import LABEL_JOB
from airflow_curation.backends.schemas import ManifestInvalid, validate_object
from airflow_curation.core import storage
from airflow_curation.hooks.factory import backend_for
from airflow_curation.jobs import attempts

OK_RESULT = {
    "result_version": 1,
    "kind": "collect",
    "status": "succeeded",
    "returncode": 0,
    "manifest_uri": "x",
    "shards": 3,
    "rows": 30,
    "bytes": 300,
}
GROUP_OK = {"result_version": 1, "kind": "group", "status": "succeeded", "returncode": 0}


def _write_result(handle, result=OK_RESULT):
    storage.write_json(handle["result"], result)


def test_registered_and_rebuildable_from_options(fake_k8s):
    backend = backend_for("kubernetes", {"host": fake_k8s.url, "namespace": "ns1", "parallelism": 3})
    again = backend_for("kubernetes", {**backend.options(), "host": fake_k8s.url})
    assert again.options() == backend.options() and "api_client" not in backend.options()
    json.dumps(backend.options())  # a trigger carries them serialised


def test_small_shards_go_several_to_a_pod(fake_k8s, make_backend, make_spec):
    """An Indexed Job sized from the input manifest gives each pod at least ``min_group_bytes`` of shards
    (a pod's fixed cost is paid once for several small shards), one pod per shard where shards are big,
    never more than ``max_shard_groups``; each shard is still its own unit."""
    mib = 1 << 20
    backend = make_backend(launch_kinds={"preprocess": "indexed"}, min_group_bytes=64 * mib, max_shard_groups=64)
    handle = backend.submit(make_spec("preprocess", shards=300, shard_bytes=mib))
    assert handle["groups"] == 4  # 300 MiB: four pods of 75 shards, not 64 pods of 4-5 (or 300 of one)
    assert fake_k8s.get("jobs", handle["name"])["spec"]["completions"] == 4
    assert backend._groups_for(make_spec("preprocess", shards=10, shard_bytes=mib)) == 1
    assert backend._groups_for(make_spec("preprocess", shards=40, shard_bytes=100 * mib)) == 40
    assert backend._groups_for(make_spec("preprocess", shards=200, shard_bytes=100 * mib)) == 64
    unfloored = make_backend(launch_kinds={"preprocess": "indexed"}, min_group_bytes=0)
    assert unfloored._groups_for(make_spec("preprocess", shards=10, shard_bytes=mib)) == 10
    again = backend_for("kubernetes", {**backend.options(), "host": fake_k8s.url})  # the trigger's copy
    assert again.min_group_bytes == 64 * mib


def test_indexed_groups_then_collect_through_every_state(fake_k8s, make_backend, make_spec):
    backend = make_backend(launch_kinds={"preprocess": "indexed"}, parallelism=2)
    handle = backend.submit(make_spec("preprocess", shards=3))
    name = handle["name"]
    assert handle["groups"] == 3 and handle["attempt"] == 1  # sized from the input manifest's shard count
    job = fake_k8s.get("jobs", name)
    cm = fake_k8s.get("configmaps", f"{name}-spec")
    assert job["spec"]["completions"] == 3 and job["spec"]["parallelism"] == 2
    argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[3:] == [
        "run",
        "/etc/curation/spec.json",
        "--result",
        f"{handle['result_dir']}/group-{{group}}.json",
        "--group",
        "$(JOB_COMPLETION_INDEX)/3",
    ]
    # The spec ConfigMap is owned by the job, so deleting the job garbage-collects it.
    assert cm["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert json.loads(cm["data"]["spec.json"])["stage"] == "preprocess"

    # The collect job is created with the groups (never by status): it waits for every group's result
    # file, then writes the manifest, so the stage finishes in the cluster even if nobody polls.
    collect = fake_k8s.get("jobs", handle["collect"])
    assert collect["metadata"]["labels"][LABEL_JOB] == name and handle["collect"] == f"{name}-collect"
    argv = collect["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[:4] == ["python", "-m", "airflow_curation.jobs", "collect"] and "--group" not in argv
    assert argv[argv.index("--result") + 1] == handle["result"]
    assert argv[argv.index("--group-results") + 1] == handle["result_dir"]
    assert argv[argv.index("--wait-groups") + 1] == "3"
    assert collect["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == f"{name}-spec"
    assert "ownerReferences" not in collect["metadata"]  # the groups' TTL must not take the collect with it

    assert backend.status(handle).state == JobState.PENDING
    fake_k8s.set_status("jobs", name, {"active": 2, "ready": 0})
    assert backend.status(handle).state == JobState.PENDING
    fake_k8s.set_status("jobs", name, {"active": 2, "ready": 2, "succeeded": 1})
    st = backend.status(handle)
    assert st.state == JobState.RUNNING and "succeeded 1" in st.message

    # Group 1's pods were all OOM-killed: no result file. status says so (retryable) and writes nothing.
    for i in (0, 2):
        storage.write_json(f"{handle['result_dir']}/group-{i}.json", GROUP_OK)
    fake_k8s.set_status(
        "jobs",
        name,
        {
            "succeeded": 2,
            "failed": 3,
            "failedIndexes": "1",
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "FailedIndexes", "message": "Job has failed indexes"}
            ],
        },
    )
    st = backend.status(handle)
    assert st.state == JobState.FAILED and st.retryable and "groups [1]" in st.message
    assert not storage.exists(f"{handle['result_dir']}/group-1.json")
    assert fake_k8s.names("jobs") == sorted([name, handle["collect"]])  # nothing created by polling

    # The follower relaunches (here no manifest exists, so every group), under the same spec; the waiting
    # collect job stays.
    backend.max_resubmits = 1
    new = _settle(backend, handle, st)
    assert new["attempt"] == 2 and new["main"] == f"{name}-a2" and new["collect"] == handle["collect"]
    again = fake_k8s.get("jobs", new["main"])
    argv = again["spec"]["template"]["spec"]["containers"][0]["command"]
    assert again["spec"]["completions"] == 3 and argv[-4:] == [
        "--group",
        "$(JOB_COMPLETION_INDEX)/3",
        "--pick",
        "0,1,2",
    ]
    assert _settle(backend, handle, st)["main"] == new["main"]  # a second follower reconnects (409)
    assert backend.status(new).state == JobState.PENDING
    storage.write_json(f"{handle['result_dir']}/group-1.json", GROUP_OK)
    fake_k8s.set_status("jobs", new["main"], {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    fake_k8s.set_status("jobs", handle["collect"], {"active": 1, "ready": 1})
    assert backend.status(new).state == JobState.RUNNING
    fake_k8s.set_status(
        "jobs", handle["collect"], {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    )
    st = backend.status(new)
    assert st.state == JobState.FAILED and "wrote no result" in st.message
    _write_result(handle)
    st = backend.status(new)
    assert st.state == JobState.SUCCEEDED and st.result["rows"] == 30


def _collect_argv(fake_k8s, name):
    return fake_k8s.get("jobs", name)["spec"]["template"]["spec"]["containers"][0]["command"]


def _flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def test_collect_pods_carry_their_attempt_and_the_followers_budget(fake_k8s, make_backend, make_spec):
    """A sweep's collect pod says which attempt it collects and how many the follower may make (``jobs collect
    --attempt N --attempts M``, as Slurm's collect job): before the last, a failure that lost units writes a
    relaunch pending into the manifest. A relaunch whose collect had ended creates one for its own attempt."""
    backend = make_backend(launch_kinds={"preprocess": "indexed"}, max_resubmits=2)
    spec = make_spec("preprocess")
    handle, objects = backend.build(spec)
    for obj in objects:
        validate_object(obj)
    (collect,) = [o for o in objects if o["metadata"]["name"] == handle["collect"]]
    argv = collect["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[:4] == ["python", "-m", "airflow_curation.jobs", "collect"]
    assert (_flag(argv, "--attempt"), _flag(argv, "--attempts")) == ("1", "3")
    group_argv = next(o for o in objects if o["metadata"]["name"] == handle["main"])["spec"]["template"]["spec"]
    assert "--attempt" not in group_argv["containers"][0]["command"]  # a group pod writes no manifest head

    handle = backend.submit(spec)
    argv = _collect_argv(fake_k8s, handle["collect"])
    assert (_flag(argv, "--attempt"), _flag(argv, "--attempts")) == ("1", "3")
    # Every group pod killed, and the collect has ended (its wait ran out): the relaunch needs a fresh collect.
    failed = {"failed": 3, "failedIndexes": "0-2", "conditions": [{"type": "Failed", "status": "True"}]}
    fake_k8s.set_status("jobs", handle["name"], failed)
    fake_k8s.set_status("jobs", handle["collect"], {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]})
    st = backend.status(handle)
    assert st.state == JobState.FAILED and st.retryable, st.message
    new = _settle(backend, handle, st)
    assert new["attempt"] == 2 and new["collect"] == f"{handle['name']}-collect-a2"
    validate_object(fake_k8s.get("jobs", new["collect"]))
    argv = _collect_argv(fake_k8s, new["collect"])
    assert (_flag(argv, "--attempt"), _flag(argv, "--attempts")) == ("2", "3")
    assert _flag(argv, "--wait-groups") == "3" and _flag(argv, "--result") == handle["result"]
    # The first collect's arguments are as they were (a pod's command is fixed once created).
    assert _flag(_collect_argv(fake_k8s, handle["collect"]), "--attempt") == "1"


def test_bad_spec_fails_the_groups_and_release_drops_the_collect(fake_k8s, make_backend, make_spec):
    backend = make_backend(launch_kinds={"preprocess": "indexed"}, max_resubmits=3)
    handle = backend.submit(make_spec())
    fake_k8s.set_status(
        "jobs",
        handle["name"],
        {
            "failed": 1,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "Container stage for pod default/x-0 failed with exit code 2",
                }
            ],
        },
    )
    st = backend.status(handle)
    assert st.state == JobState.FAILED and "exit code 2" in st.message and not st.retryable
    assert fake_k8s.get("jobs", handle["collect"]) is not None  # status deletes nothing
    assert _settle(backend, handle, st) is None  # not retryable: the run is over
    assert fake_k8s.get("jobs", handle["collect"]) is None  # the waiting collect could not help


def test_failed_job_reports_the_stage_error(fake_k8s, make_backend, make_spec):
    backend = make_backend(launch_kinds={"ingest": "job"})
    handle = backend.submit(make_spec("ingest"))
    assert handle["kind"] == "Job" and "groups" not in handle
    _write_result(
        handle,
        {
            "result_version": 1,
            "kind": "run",
            "status": "failed",
            "returncode": 1,
            "error": "StageFailed: 2 of 3 units failed",
        },
    )
    fake_k8s.set_status(
        "jobs",
        handle["name"],
        {"failed": 3, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
    )
    st = backend.status(handle)
    assert st.state == JobState.FAILED
    assert "BackoffLimitExceeded" in st.message and "2 of 3 units failed" in st.message


@pytest.mark.parametrize(
    "stage, plural, failed",
    [("dedup", "daskjobs", {"jobStatus": "Failed"}), ("enrich", "rayjobs", {"jobDeploymentStatus": "Failed"})],
)
def test_dask_and_ray_jobs_are_relaunched_as_the_next_object_of_the_run(
    fake_k8s, make_backend, make_spec, stage, plural, failed
):
    backend = make_backend(max_resubmits=1)
    handle = backend.submit(make_spec(stage))
    name = handle["name"]
    fake_k8s.set_status(plural, name, failed)
    st = backend.status(handle)
    assert st.state == JobState.FAILED and st.retryable  # its pods died without writing a result

    new = _settle(backend, handle, st)
    assert new["attempt"] == 2 and new["main"] == f"{name}-a2" and new["kind"] == handle["kind"]
    obj = fake_k8s.get(plural, new["main"])
    validate_object(obj)  # the CRD's schema (the API server stand-in checked it too)
    assert obj["metadata"]["labels"][LABEL_JOB] == name  # the run's label: logs and clean-up find every attempt
    assert {v["configMap"]["name"] for v in _pod_volumes(obj)} == {f"{name}-spec"}  # the run's spec
    assert attempts.latest(backend, handle).to_dict() == new  # whoever holds attempt 1's handle follows attempt 2
    assert _settle(backend, handle, st) == new  # so does a second follower: no third object
    assert fake_k8s.names(plural) == sorted([name, new["main"]])
    assert backend.status(new).state == JobState.PENDING

    fake_k8s.set_status(plural, new["main"], failed)
    assert _settle(backend, new, backend.status(new)) is None  # no attempts left: the run is over
    backend.cancel(new)
    assert fake_k8s.names(plural) == [] and fake_k8s.names("configmaps") == []


def test_a_ray_job_refused_by_validation_is_not_relaunched(fake_k8s, make_backend, make_spec):
    backend = make_backend(max_resubmits=3)
    handle = backend.submit(make_spec("enrich"))
    fake_k8s.set_status("rayjobs", handle["name"], {"jobDeploymentStatus": "ValidationFailed"})
    st = backend.status(handle)
    assert st.state == JobState.FAILED and not st.retryable and _settle(backend, handle, st) is None


def _settle(backend, handle, st):
    """The follower's decision (:func:`airflow_curation.jobs.attempts.settle`), as the handle dict."""
    new = attempts.settle(backend, handle, st)
    return None if new is None else new.to_dict()


def _pod_volumes(obj):
    """Every volume of every pod template in a DaskJob or RayJob."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "containers" in node:
                found.extend(v for v in node.get("volumes", []) if "configMap" in v)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj["spec"])
    assert found
    return found


def test_submit_twice_reconnects_on_409_and_a_failed_job_gets_a_fresh_name(fake_k8s, make_backend, make_spec):
    backend = make_backend()
    spec = make_spec("dedup")
    first = backend.submit(spec)
    again = backend.submit(spec)
    assert again == first and fake_k8s.names("daskjobs") == [first["name"]]
    posts = [r for r in fake_k8s.requests if r[0] == "POST" and "daskjobs" in r[1]]
    assert len(posts) == 2  # the second create answered 409 AlreadyExists

    fake_k8s.set_status("daskjobs", first["name"], {"jobStatus": "Failed"})
    third = backend.submit(spec)
    assert third["name"] == f"{first['name']}-r1" and third["revision"] == 1
    assert fake_k8s.names("daskjobs") == sorted([first["name"], third["name"]])


def test_lost_create_response_is_retried_into_a_reconnect(fake_k8s, make_backend, make_spec):
    backend = make_backend()
    # The API server creates the RayJob, then the answer is lost as a 500: the retry gets 409.
    fake_k8s.fault("POST", r"/rayjobs$", 500, after=True)
    handle = backend.submit(make_spec("enrich"))
    assert fake_k8s.names("rayjobs") == [handle["name"]]
    assert fake_k8s.get("configmaps", f"{handle['name']}-spec")["metadata"]["ownerReferences"]


def test_5xx_is_retried_by_the_provider_then_surfaces(fake_k8s, make_backend, make_spec):
    """The factory's client retries as the cncf-kubernetes provider does (``generic_api_retry``: its
    attempts, its transient statuses); the backend has no retry of its own."""
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import API_RETRIES

    backend = make_backend()
    handle = backend.submit(make_spec("dedup"))
    fake_k8s.fault("GET", r"/daskjobs/", 503, count=API_RETRIES - 1)
    assert backend.status(handle).state == JobState.PENDING  # every attempt but the last failed
    fake_k8s.fault("GET", r"/daskjobs/", 502, count=API_RETRIES)
    with pytest.raises(ApiException) as e:
        backend.status(handle)
    assert e.value.status == 502 and not fake_k8s.faults[-1].count
    fake_k8s.fault("GET", r"/daskjobs/", 403, count=1)  # not transient: no retry
    with pytest.raises(ApiException) as e:
        backend.status(handle)
    assert e.value.status == 403 and not fake_k8s.faults[-1].count


def test_invalid_objects_never_reach_the_server(fake_k8s, make_backend, make_spec):
    bad_pod = {"tolerations": [{"keyy": "gpu"}]}
    with pytest.raises(ManifestInvalid, match="keyy"):
        make_backend(pod=bad_pod).submit(make_spec())
    assert not [r for r in fake_k8s.requests if r[0] == "POST"]
    # Without client-side validation the API server refuses it (422), and nothing is retried.
    with pytest.raises(ApiException) as e:
        make_backend(pod=bad_pod, validate=False).submit(make_spec())
    assert e.value.status == 422
    assert len([r for r in fake_k8s.requests if r[0] == "POST" and "jobs" in r[1]]) <= 1


def test_ray_and_dask_state_mapping(fake_k8s, make_backend, make_spec):
    backend = make_backend()
    ray = backend.submit(make_spec("enrich"))
    assert ray["kind"] == "RayJob"
    for status, state in [
        ({}, JobState.PENDING),
        ({"jobDeploymentStatus": "Initializing"}, JobState.PENDING),
        ({"jobDeploymentStatus": "Running", "jobStatus": "PENDING"}, JobState.PENDING),
        ({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, JobState.RUNNING),
        ({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "oom"}, JobState.FAILED),
        ({"jobDeploymentStatus": "ValidationFailed"}, JobState.FAILED),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}, JobState.CANCELLED),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"}, JobState.FAILED),
    ]:
        fake_k8s.set_status("rayjobs", ray["name"], status)
        assert backend.status(ray).state == state, status
    fake_k8s.set_status("rayjobs", ray["name"], {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})
    _write_result(ray)
    assert backend.status(ray).state == JobState.SUCCEEDED

    dask = backend.submit(make_spec("dedup"))
    for status, state in [
        ({"jobStatus": "JobCreated"}, JobState.PENDING),
        ({"jobStatus": "ClusterCreated"}, JobState.PENDING),
        ({"jobStatus": "Running"}, JobState.RUNNING),
        ({"jobStatus": "Failed"}, JobState.FAILED),
    ]:
        fake_k8s.set_status("daskjobs", dask["name"], status)
        assert backend.status(dask).state == state, status


def test_object_gone_uses_the_result_or_reports_it(fake_k8s, make_backend, make_spec):
    backend = make_backend()
    handle = backend.submit(make_spec("ingest"))
    fake_k8s.objects = {k: v for k, v in fake_k8s.objects.items() if k[1] != "jobs"}  # deleted behind our back
    st = backend.status(handle)
    assert st.state == JobState.FAILED and "not found" in st.message
    _write_result(handle)  # finished, then removed by ttlSecondsAfterFinished
    assert backend.status(handle).state == JobState.SUCCEEDED


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_cancel_deletes_everything_with_the_propagation_policy(fake_k8s, make_backend, make_spec, policy):
    backend = make_backend(propagation_policy=policy, launch_kinds={"preprocess": "indexed"})
    handle = backend.submit(make_spec())
    fake_k8s.set_status(
        "jobs", handle["name"], {"succeeded": 3, "conditions": [{"type": "Complete", "status": "True"}]}
    )
    backend.cancel(handle)
    assert fake_k8s.names("jobs") == [] and fake_k8s.names("configmaps") == []
    assert {(p, pol) for p, _, pol in fake_k8s.deletes} == {("jobs", policy), ("configmaps", policy)}
    assert len(fake_k8s.deletes) == 3
    assert backend.status(handle).state == JobState.CANCELLED
    backend.cancel(handle)  # idempotent: 404s are fine
    assert backend.status(handle).state == JobState.CANCELLED


def test_cancel_ray_job(fake_k8s, make_backend, make_spec):
    backend = make_backend()
    handle = backend.submit(make_spec("enrich"))
    backend.cancel(handle)
    assert fake_k8s.names("rayjobs") == []
    assert ("rayjobs", handle["name"], "Background") in fake_k8s.deletes


def test_logs_stream_from_offsets_across_pods(fake_k8s, make_backend, make_spec):
    backend = make_backend(launch_kinds={"preprocess": "indexed"})
    handle = backend.submit(make_spec())
    assert backend.logs(handle, 0) == ("", 0)
    labels = {LABEL_JOB: handle["name"]}
    fake_k8s.add_pod("p-0", labels, {"stage": "unit part-00000 done\n"})
    fake_k8s.add_pod("other", {LABEL_JOB: "someone-else"}, {"stage": "not ours\n"})
    text, off = backend.logs(handle, 0)
    assert "unit part-00000 done" in text and "not ours" not in text
    fake_k8s.logs[("default", "p-0", "stage")] += "unit part-00001 done\n"
    fake_k8s.add_pod("p-1", labels, {"stage": "group 1\n", "sidecar": "noise\n"})
    more, off2 = backend.logs(handle, off)
    assert more.startswith("unit part-00001 done") and "group 1" in more and "noise" not in more
    assert backend.logs(handle, off2) == ("", off2)


def test_secret_env_goes_into_a_job_secret_never_into_the_pod_spec(fake_k8s, make_backend, make_spec):
    creds = '{"key": "AKIA-TEST", "secret": "s3cr3t-value", "client_kwargs": {"endpoint_url": "http://s3:9000"}}'
    backend = make_backend(env={"CURATION_STORAGE_OPTIONS_S3": creds}, launch_kinds={"preprocess": "indexed"})
    handle = backend.submit(make_spec())
    secret = fake_k8s.get("secrets", handle["env_secret"])
    assert secret["stringData"]["CURATION_STORAGE_OPTIONS_S3"] == creds
    assert secret["metadata"]["ownerReferences"][0]["name"] == handle["name"]
    job = fake_k8s.get("jobs", handle["name"])
    assert "s3cr3t-value" not in json.dumps(job)
    env_from = job["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert env_from == [{"secretRef": {"name": "lake-creds"}}, {"secretRef": {"name": handle["env_secret"]}}]
    collect = fake_k8s.get("jobs", handle["collect"])
    assert collect["spec"]["template"]["spec"]["containers"][0]["envFrom"] == env_from
    backend.cancel(handle)
    assert fake_k8s.names("secrets") == []


def test_a_cloud_key_in_pod_env_reaches_the_api_server_only_in_the_job_secret(fake_k8s, make_backend, make_spec):
    aws = "wJalrXUtnFEMI-fake-9d2b"
    pod = {"storage_secret": "lake-creds", "env": {"AWS_SECRET_ACCESS_KEY": aws, "PLAIN": "1"}}
    backend = make_backend(pod=pod, launch_kinds={"preprocess": "indexed"})
    handle = backend.submit(make_spec())
    assert fake_k8s.get("secrets", handle["env_secret"])["stringData"]["AWS_SECRET_ACCESS_KEY"] == aws
    stored = [fake_k8s.get(plural, n) for plural in ("jobs", "configmaps") for n in fake_k8s.names(plural)]
    assert len(stored) == 3  # groups, collect, spec
    assert all(aws not in json.dumps(obj) for obj in stored)
    for job in (fake_k8s.get("jobs", handle["name"]), fake_k8s.get("jobs", handle["collect"])):
        [c] = job["spec"]["template"]["spec"]["containers"]
        assert {"secretRef": {"name": handle["env_secret"]}} in c["envFrom"]
        assert {"name": "PLAIN", "value": "1"} in c["env"]
