"""The users' journey against a real Airflow, through a real browser.

The shipped ``curation_pipeline`` DAG is copied into the dags folder as a user would, with its defaults
in the deployment (the ``curation_default`` connection, Airflow Variables). Unpausing it starts the
scheduled run; headless Chromium then creates a backfill from the Trigger dialog and submits the
default (empty) trigger form. Every run must write its own partition and report, link its manifest,
job log and report through the plugin, stream its jobs' logs into the gates' logs, and emit an asset
event on its own lake. A second, small DAG (synthetic shards + the real ValidateOperator) fails on
stricter params with a readable message.
"""

from __future__ import annotations

import json
import time
from urllib.parse import quote, unquote

import pytest

from airflow_curation.core.layout import curation_run_id
from airflow_curation.core.manifest import Manifest

from .conftest import ARTIFACTS, PASSWORD, PIPELINE_DATASET, USER

PIPELINE = "curation_pipeline"
DAG_ID = "curation_journey"
BACKFILL_DATES = ["2026-11-10", "2026-11-11"]
MANUAL_DATE, FAILING_DATE = "2026-11-20", "2026-11-21"
DONE = ("success", "failed")


def _wait(predicate, timeout: float, what: str, stack, interval: float = 2.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last}\n{stack.logs()}")


def _runs(stack, dag_id: str = DAG_ID) -> dict[str, dict]:
    body = stack.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")
    return {r["dag_run_id"]: r for r in body["dag_runs"]}


def _by_date(runs: dict[str, dict], run_type: str | None = None) -> dict[str, dict]:
    return {
        r["logical_date"][:10]: r
        for r in runs.values()
        if r.get("logical_date") and (run_type is None or r["run_type"] == run_type)
    }


def _get_dag(s, dag_id=DAG_ID):
    try:
        return s.request("GET", f"/api/v2/dags/{dag_id}")
    except AssertionError:
        return None


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-extensions",
        "--no-first-run",
        "--window-size=1500,1000",
    ):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


class UI:
    """A logged-in Chromium on the Airflow UI, with the few gestures the journey needs."""

    def __init__(self, stack) -> None:
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys
        from selenium.webdriver.support import expected_conditions as EC
        from selenium.webdriver.support.ui import WebDriverWait

        self.s, self.By = stack, By
        self.d = _browser()
        # The UI navigates on its own after a page loads (``/`` to the login form, the form to the app):
        # a lookup that meets such a navigation fails with "aborted by navigation"; the wait looks again.
        self.wait = WebDriverWait(self.d, 90, ignored_exceptions=(WebDriverException,))
        self.d.get(stack.url + "/")
        user = self.wait.until(EC.presence_of_element_located((By.NAME, "username")))
        user.send_keys(USER)
        pw = self.d.find_element(By.NAME, "password")
        pw.send_keys(PASSWORD)
        pw.send_keys(Keys.ENTER)
        self.wait.until(lambda drv: "login" not in drv.current_url.lower())

    def body(self) -> str:
        return self.d.find_element(self.By.TAG_NAME, "body").text

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.d.save_screenshot(str(ARTIFACTS / name))

    def trigger_dialog(self, dag_id: str):
        By = self.By
        self.d.get(f"{self.s.url}/dags/{dag_id}")
        self.wait.until(lambda drv: drv.find_elements(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))
        self.d.find_element(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']").click()
        return self.wait.until(
            lambda drv: [
                x
                for x in drv.find_elements(By.CSS_SELECTOR, "[role=dialog]")
                if "Trigger Dag" in x.text or "Run Backfill" in x.text
            ]
        )[0]

    def set_datetime(self, dialog, index: int, date: str, hm: str = "00:00") -> None:
        """Type into the index-th date-time picker of the dialog (its popover: date, then time)."""
        By = self.By
        picker = dialog.find_elements(By.CSS_SELECTOR, "[data-testid=datetime-input]")[index]
        picker.click()
        pop = self.wait.until(
            lambda drv: drv.find_element(By.ID, picker.get_attribute("id").replace(":trigger", ":content"))
        )
        pop.find_element(By.CSS_SELECTOR, "input[placeholder='YYYY/MM/DD']").send_keys(date.replace("-", "/"))
        pop.find_element(By.CSS_SELECTOR, "input[placeholder='HH:mm']").send_keys(hm)
        time.sleep(0.5)
        if pop.is_displayed():
            picker.click()  # close the popover
        self.wait.until(lambda drv: date[:4] in picker.text)

    def button(self, dialog, label: str):
        return dialog.find_element(self.By.XPATH, f".//button[normalize-space(.)='{label}']")

    def close(self) -> None:
        self.d.quit()


@pytest.fixture(scope="module")
def ui(airflow_stack):
    u = UI(airflow_stack)
    yield u
    u.close()


@pytest.fixture(scope="module")
def journey(airflow_stack, ui):
    s = airflow_stack
    for dag_id in (PIPELINE, DAG_ID):
        _wait(lambda: _get_dag(s, dag_id), 180, f"the DAG {dag_id} to be parsed", s)
    plugins = s.request("GET", "/api/v2/plugins")["plugins"]
    assert "curation" in [p["name"] for p in plugins], plugins
    # The api-server loaded this checkout's plugin (its link routes answer with their own message).
    status, text = s.get_text(f"/curation/manifest/{PIPELINE}/no-run/ingest.launch")
    assert status == 404 and "has no manifest" in text, text

    # The small DAG: a passing run and one with a stricter param, through the REST API.
    s.request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    s.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": f"{MANUAL_DATE}T00:00:00Z", "conf": {}})
    s.request(
        "POST",
        f"/api/v2/dags/{DAG_ID}/dagRuns",
        {"logical_date": f"{FAILING_DATE}T00:00:00Z", "conf": {"min_rows": 100000}},
    )

    # The pipeline: unpausing starts its scheduled run (today's partition, deployment defaults). It runs
    # alone: its validate creates the curated Asset of the lake (Airflow 3.3.2 fails one of two tasks
    # that create the same new Asset through an alias at the same moment), and today's partition must be
    # free for the manual run below (the stages hold a lease on a partition).
    s.request("PATCH", f"/api/v2/dags/{PIPELINE}", {"is_paused": False})
    _wait(
        lambda: [r for r in _runs(s, PIPELINE).values() if r["run_type"] == "scheduled" and r["state"] in DONE],
        600,
        "the scheduled pipeline run",
        s,
        interval=3,
    )
    # A backfill from the Trigger dialog, params untouched (so not overridden: the defaults apply).
    dialog = ui.trigger_dialog(PIPELINE)
    dialog.find_element(ui.By.XPATH, ".//*[normalize-space(text())='Backfill']").click()
    ui.wait.until(lambda drv: "Date Range" in dialog.text)
    ui.set_datetime(dialog, 0, BACKFILL_DATES[0])
    ui.set_datetime(dialog, 1, BACKFILL_DATES[-1])
    ui.wait.until(lambda drv: f"{len(BACKFILL_DATES)} runs will be triggered" in dialog.text)
    ui.shot("journey_backfill_dialog.png")
    run_backfill = ui.button(dialog, "Run Backfill")
    assert run_backfill.get_attribute("disabled") is None
    run_backfill.click()
    backfills = _wait(
        lambda: s.request("GET", f"/api/v2/backfills?dag_id={PIPELINE}")["backfills"], 60, "the backfill", s
    )

    # The default trigger form (today's date, all params empty or default).
    dialog = ui.trigger_dialog(PIPELINE)
    dialog.find_element(ui.By.XPATH, ".//*[normalize-space(text())='Single Run']").click()
    ui.wait.until(lambda drv: "Logical Date" in dialog.text)
    assert "Run Parameters" in dialog.text and "Empty: the Airflow Variable curation_input" in dialog.text
    ui.shot("journey_trigger_form.png")
    trigger = ui.button(dialog, "Trigger")
    assert trigger.get_attribute("disabled") is None  # every param is valid when empty
    trigger.click()
    ui.wait.until(lambda drv: "/runs/manual__" in drv.current_url)
    manual_run_id = unquote(ui.d.current_url.split("/runs/", 1)[1].split("/")[0])

    def finished():
        pipeline, small = _runs(s, PIPELINE), _runs(s, DAG_ID)
        bf = _by_date(pipeline, "backfill")
        wanted = [bf.get(d) for d in BACKFILL_DATES] + [pipeline.get(manual_run_id)]
        wanted += [_by_date(small).get(d) for d in (MANUAL_DATE, FAILING_DATE)]
        return (pipeline, small) if all(r and r["state"] in DONE for r in wanted) else None

    pipeline, small = _wait(finished, 600, "the runs to finish", s, interval=3)
    manual = [r for r in pipeline.values() if r["run_type"] == "manual"][0]
    return {"pipeline": pipeline, "small": small, "backfills": backfills, "manual": manual}


def _why(s, run: dict, dag_id: str = PIPELINE) -> str:
    """The failed tasks' logs of a run, for a readable assertion message."""
    rid = quote(run["dag_run_id"])
    out = []
    for ti in s.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances")["task_instances"]:
        if ti["state"] not in ("success", "skipped"):
            _, text = _log(s, dag_id, run, ti["task_id"], max(ti["try_number"], 1))
            out.append(f"--- {ti['task_id']} {ti['state']}\n{text[-4000:]}")
    return "\n".join(out)


def _log(s, dag_id: str, run: dict, task_id: str, try_number: int = 1) -> tuple[int, str]:
    return s.get_text(
        f"/api/v2/dags/{dag_id}/dagRuns/{quote(run['dag_run_id'])}/taskInstances/{task_id}/logs/"
        f"{try_number}?full_content=true"
    )


def _run_id(run: dict, date: str) -> str:
    """The curation run id of a DAG run (REST fields): the snapshot first (``2026-11-30__scheduled``)."""
    return curation_run_id(run["dag_run_id"], date, run_type=run["run_type"], logical_date=run["logical_date"])


def _report(s, run: dict, dataset: str) -> tuple[dict, str]:
    date = run["logical_date"][:10]
    base = s.lake / dataset / f"snapshot={date}" / "_manifests" / _run_id(run, date)
    return json.loads((base / "report.json").read_text()), (base / "report.html").read_text()


def _pipeline_runs(j) -> list[dict]:
    return [r for r in j["pipeline"].values() if r["run_type"] in ("backfill", "manual", "scheduled")]


def test_default_trigger_form_and_scheduled_run_use_the_deployments_defaults(airflow_stack, journey):
    s, j = airflow_stack, journey
    for run in (j["manual"], *[r for r in j["pipeline"].values() if r["run_type"] == "scheduled"]):
        assert run["state"] == "success", (run["dag_run_id"], _why(s, run))
        report, page = _report(s, run, PIPELINE_DATASET)  # lake from the connection, dataset a Variable
        assert report["status"] == "passed" and report["lake"]["root"] == str(s.lake)
        # the deployment gives no quality model, enrich model or tokenizer: those stages are skipped, PII always runs
        assert [f["label"] for f in report["metrics"]["funnel"]] == ["ingested", "preprocess", "dedup", "pii scanned"]
        assert "<th>quarantined</th>" in page
    assert j["manual"]["conf"]["input"] is None and j["manual"]["conf"]["lake"] is None


def test_backfill_from_the_dialog_runs_each_date_into_its_own_partition(airflow_stack, journey):
    s, j = airflow_stack, journey
    assert len(j["backfills"]) == 1 and j["backfills"][0]["from_date"].startswith(BACKFILL_DATES[0])
    backfilled = _by_date(j["pipeline"], "backfill")
    assert sorted(backfilled) == BACKFILL_DATES
    for date, run in backfilled.items():
        assert run["state"] == "success", (date, _why(s, run))
        report, page = _report(s, run, PIPELINE_DATASET)
        assert report["status"] == "passed" and report["snapshot"] == date and f"snapshot={date}" in page
        ingest = Manifest.read(
            str(s.lake / PIPELINE_DATASET / f"snapshot={date}" / "_manifests" / _run_id(run, date) / "ingest.json")
        )
        assert all(f"snapshot={date}/" in sh.uri for sh in ingest.shards)
    partitions = {p.name for p in (s.lake / PIPELINE_DATASET).iterdir()}
    assert {f"snapshot={d}" for d in BACKFILL_DATES} <= partitions


def test_the_curated_asset_event_follows_the_runs_lake(airflow_stack, journey):
    s, j = airflow_stack, journey
    events = [
        e for e in s.request("GET", "/api/v2/assets/events?limit=100")["asset_events"] if e["source_dag_id"] == PIPELINE
    ]
    by_run = {e["source_run_id"]: e for e in events}
    for run in _pipeline_runs(j):
        event = by_run[run["dag_run_id"]]
        assert event["uri"] == f"file://{s.lake}/{PIPELINE_DATASET}", event
        assert event["extra"]["snapshot"] == run["logical_date"][:10] and event["extra"]["curated_rows"] > 0


def test_links_render_in_the_ui_and_the_plugin_serves_them(airflow_stack, journey, ui):
    s, j, By = airflow_stack, journey, ui.By
    run = _by_date(j["pipeline"], "backfill")[BACKFILL_DATES[0]]
    rid = quote(run["dag_run_id"], safe="")
    ui.d.get(f"{s.url}/dags/{PIPELINE}/runs/{rid}/tasks/ingest.launch/details")  # the Extra Links
    ui.wait.until(lambda drv: drv.find_elements(By.LINK_TEXT, "Curation job log"))
    time.sleep(1)
    ui.shot("journey_task_links.png")
    manifest = ui.d.find_element(By.LINK_TEXT, "Curation manifest").get_attribute("href")
    job_log = ui.d.find_element(By.LINK_TEXT, "Curation job log").get_attribute("href")
    assert manifest.startswith(f"{s.url}/curation/manifest/{PIPELINE}/") and "/joblog/" in job_log
    ui.d.get(manifest)
    body = ui.body().replace('":"', '": "')  # the manifest's head: its run, status and counts
    assert '"stage": "ingest"' in body and f'"snapshot": "{BACKFILL_DATES[0]}"' in body
    ui.d.get(job_log)
    assert "units planned" in ui.body()
    # The skipped enrich shows no link (and read no XCom for one).
    links = s.request("GET", f"/api/v2/dags/{PIPELINE}/dagRuns/{rid}/taskInstances/enrich.launch/links")["extra_links"]
    assert not any(links.values()), links
    # Validate's report link opens the run's "Curation report" tab; the page offers a tab of its own.
    ui.d.get(f"{s.url}/dags/{PIPELINE}/runs/{rid}/tasks/validate/details")
    ui.wait.until(lambda drv: drv.find_elements(By.LINK_TEXT, "Curation report"))
    ui.d.find_element(By.LINK_TEXT, "Curation report").click()
    ui.wait.until(lambda drv: drv.current_url.endswith("/plugin/curation-report"))
    frame = ui.wait.until(lambda drv: drv.find_element(By.TAG_NAME, "iframe"))
    ui.d.switch_to.frame(frame)
    ui.wait.until(lambda drv: "Curation funnel" in ui.body())
    opener = ui.d.find_element(By.ID, "open-new-tab")
    assert opener.get_attribute("target") == "_blank" and "quarantined" in ui.body()
    assert opener.get_attribute("href").startswith(f"{s.url}/curation/report/{PIPELINE}/")
    ui.d.switch_to.default_content()


def test_gates_stream_the_job_log_and_no_task_logs_xcom_errors(airflow_stack, journey):
    s, j = airflow_stack, journey
    run = _by_date(j["pipeline"], "backfill")[BACKFILL_DATES[1]]
    _, gate = _log(s, PIPELINE, run, "ingest.checkpoints")
    assert "[job ingest-" in gate and "units planned" in gate, gate[-3000:]
    assert "ingest: unit " in gate and "checkpointed: " in gate and "read " in gate
    for ti in s.request("GET", f"/api/v2/dags/{PIPELINE}/dagRuns/{quote(run['dag_run_id'])}/taskInstances")[
        "task_instances"
    ]:
        if ti["try_number"]:
            _, text = _log(s, PIPELINE, run, ti["task_id"], ti["try_number"])
            assert "XCom not found" not in text, (ti["task_id"], text[-2000:])


def test_metrics_and_lineage_for_every_stage(airflow_stack, journey):
    s = airflow_stack
    names = {line.split(":", 1)[0] for line in s.statsd.lines}
    for stage in ("ingest", "preprocess", "dedup"):
        for metric in ("units_done", "gate_rows", "rows_kept", "stage_seconds"):
            assert f"airflow.curation.{stage}.{metric}" in names, (
                stage,
                metric,
                sorted(n for n in names if "curation" in n),
            )
    assert "airflow.curation.validate.checks_failed" in names
    events = [json.loads(line) for line in (s.home / "openlineage.jsonl").read_text().splitlines() if line.strip()]
    done = {}
    for e in events:
        if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith(f"{PIPELINE}."):
            done.setdefault(e["job"]["name"].split(".", 1)[1], e)
    part = f"{PIPELINE_DATASET}/snapshot="
    io = {
        t.split(".")[0]: ([i["name"] for i in done[t]["inputs"]], [o["name"] for o in done[t]["outputs"]])
        for t in ("ingest.launch", "preprocess.launch", "dedup.launch", "validate")
    }
    assert io["ingest"][0][0].endswith("input.jsonl") and io["ingest"][1][0].endswith("/shards")
    assert io["preprocess"][0][0].endswith("/shards") and io["preprocess"][1][0].endswith("/attrs/preprocess")
    assert io["dedup"][1][0].endswith("/attrs/dedup") and part in io["dedup"][0][0]
    assert part in io["validate"][0][0] and io["validate"][1][0].endswith("report.html")
    facets = done["validate"]["inputs"][0]
    assert {a["assertion"] for a in facets["facets"]["dataQualityAssertions"]["assertions"]} >= {
        "accounting",
        "min_rows",
    }
    assert facets["inputFacets"]["dataQualityMetrics"]["rowCount"] > 0


def test_stricter_param_fails_the_run_with_a_readable_message(airflow_stack, journey):
    s, j = airflow_stack, journey
    small = _by_date(j["small"])
    assert small[MANUAL_DATE]["state"] == "success", _why(s, small[MANUAL_DATE], DAG_ID)
    run = small[FAILING_DATE]
    assert run["state"] == "failed"
    report, page = _report(s, run, "journey")
    assert report["status"] == "failed" and "FAILED" in page
    ti = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run['dag_run_id'])}/taskInstances/validate"
    tinst = s.request("GET", ti)
    assert tinst["state"] == "failed"
    # The last try's log (a deferral race in Airflow 3.3.2 may have cost a first try; failed checks
    # themselves never retry).
    status, text = _log(s, DAG_ID, run, "validate", max(tinst["try_number"], 1))
    assert status == 200 and "[FAIL] min_rows" in text and "expected >= 100000" in text


def test_plugin_serves_the_report_only_to_authorised_users(airflow_stack, journey):
    s, j = airflow_stack, journey
    run = _by_date(j["pipeline"], "backfill")[BACKFILL_DATES[0]]
    path = f"/curation/report/{PIPELINE}/{quote(run['dag_run_id'], safe='')}"
    status, text = s.get_text(path)
    assert status == 200 and f"snapshot={BACKFILL_DATES[0]}" in text and "<svg" in text
    import urllib.error
    import urllib.request

    for p in (path, f"/curation/manifest/{PIPELINE}/{quote(run['dag_run_id'], safe='')}/ingest.launch"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(s.url + p, timeout=30)
        assert e.value.code in (401, 403)
    status, text = s.get_text("/curation/")  # the Browse menu's list of reports
    assert status == 200 and quote(run["dag_run_id"], safe="") in text
    status, text = s.get_text(f"/curation/report/{PIPELINE}/no-such-run")
    assert status == 404 and "no curation report" in text.lower()


def test_ui_grid_and_report_tab(airflow_stack, journey, ui):
    s, j, By = airflow_stack, journey, ui.By
    ui.d.get(f"{s.url}/dags/{PIPELINE}")
    ui.wait.until(lambda drv: "preprocess" in ui.body() and "validate" in ui.body())  # one group per stage
    time.sleep(2)  # let the grid's bars paint before the screenshot
    ui.shot("journey_dag_grid.png")
    run = _by_date(j["pipeline"], "backfill")[BACKFILL_DATES[1]]
    ui.d.get(f"{s.url}/dags/{PIPELINE}/runs/{quote(run['dag_run_id'], safe='')}")
    ui.wait.until(lambda drv: "Curation report" in ui.body())
    ui.d.find_element(By.XPATH, "//*[normalize-space(text())='Curation report']").click()
    frame = ui.wait.until(lambda drv: drv.find_element(By.TAG_NAME, "iframe"))
    time.sleep(2)
    ui.shot("journey_run_report_tab.png")
    ui.d.switch_to.frame(frame)
    ui.wait.until(lambda drv: "Curation funnel" in ui.body())
    text = ui.body()
    assert f"snapshot={BACKFILL_DATES[1]}" in text and "PASSED" in text and "quarantined" in text
    ui.d.switch_to.default_content()
    ui.d.get(f"{s.url}/curation/report/{PIPELINE}/{quote(run['dag_run_id'], safe='')}")
    ui.wait.until(lambda drv: "Curation funnel" in ui.body())
    ui.shot("journey_report.png")
    assert "clusters" in ui.body() and len(ui.d.find_elements(By.TAG_NAME, "svg")) >= 3
