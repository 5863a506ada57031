"""The users' journey against a real Airflow: unpause a recurring curation DAG, trigger a run through
the REST API, backfill three logical dates through ``POST /api/v2/backfills``, see each date's lake
partition and report; a run with stricter params fails on its checks with a readable message; then
headless Chromium logs into the UI and screenshots the DAG grid and the run's curation report."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

from airflow_curation.core.layout import sanitize_run_id
from .conftest import ARTIFACTS, PASSWORD, USER

DAG_ID = "curation_journey"
STAGES_DAG = "curation_journey_stages"
BACKFILL_DATES = ["2026-11-10", "2026-11-11", "2026-11-12"]
MANUAL_DATE, FAILING_DATE = "2026-11-20", "2026-11-21"


def _wait(predicate, timeout: float, what: str, stack, interval: float = 2.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last}\n{stack.logs()}")


def _runs(stack) -> dict[str, dict]:
    body = stack.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")
    return {r["logical_date"][:10]: r for r in body["dag_runs"] if r.get("logical_date")}


@pytest.fixture(scope="module")
def journey(airflow_stack):
    s = airflow_stack
    # The dag-processor parses the DAG; the plugin is loaded by the api-server from the entry point.
    _wait(lambda: _get_dag(s), 180, "the DAG to be parsed", s)
    plugins = s.request("GET", "/api/v2/plugins")["plugins"]
    assert "curation" in [p["name"] for p in plugins], plugins

    s.request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    s.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
              {"logical_date": f"{MANUAL_DATE}T00:00:00Z", "conf": {}})
    s.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
              {"logical_date": f"{FAILING_DATE}T00:00:00Z", "conf": {"min_rows": 100000}})
    backfill = s.request("POST", "/api/v2/backfills", {
        "dag_id": DAG_ID, "from_date": f"{BACKFILL_DATES[0]}T00:00:00Z",
        "to_date": f"{BACKFILL_DATES[-1]}T00:00:00Z", "run_backwards": False, "dag_run_conf": {},
        "reprocess_behavior": "none", "max_active_runs": 3})
    _wait(lambda: _get_dag(s, STAGES_DAG), 120, "the stages DAG to be parsed", s)
    s.request("PATCH", f"/api/v2/dags/{STAGES_DAG}", {"is_paused": False})
    stages_run = s.request("POST", f"/api/v2/dags/{STAGES_DAG}/dagRuns",
                           {"logical_date": f"{MANUAL_DATE}T00:00:00Z", "conf": {}})
    wanted = BACKFILL_DATES + [MANUAL_DATE, FAILING_DATE]

    def finished():
        runs = _runs(s)
        states = {d: runs[d]["state"] for d in wanted if d in runs}
        return runs if len(states) == len(wanted) and all(v in ("success", "failed") for v in states.values()) \
            else None

    runs = _wait(finished, 420, "the runs to finish", s)
    rid = quote(stages_run["dag_run_id"], safe="")
    stages_run = _wait(lambda: (lambda r: r if r["state"] in ("success", "failed") else None)(
        s.request("GET", f"/api/v2/dags/{STAGES_DAG}/dagRuns/{rid}")), 300, "the stages run to finish", s)
    return s, runs, backfill, stages_run


def _get_dag(s, dag_id=DAG_ID):
    try:
        return s.request("GET", f"/api/v2/dags/{dag_id}")
    except AssertionError:
        return None


def _why(s, run: dict, dag_id: str = DAG_ID) -> str:
    """The failed tasks' logs of a run, for a readable assertion message."""
    rid = quote(run["dag_run_id"])
    out = []
    for ti in s.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances")["task_instances"]:
        if ti["state"] != "success":
            _, text = s.get_text(f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances/{ti['task_id']}/logs/"
                                 f"{max(ti['try_number'], 1)}?full_content=true")
            out.append(f"--- {ti['task_id']} {ti['state']}\n{text[-4000:]}")
    return "\n".join(out)


def _report(s, run: dict) -> dict:
    date = run["logical_date"][:10]
    base = s.lake / "journey" / f"snapshot={date}" / "_manifests" / sanitize_run_id(run["dag_run_id"])
    return json.loads((base / "report.json").read_text()), (base / "report.html").read_text()


def test_run_and_three_date_backfill_succeed_with_a_partition_and_report_each(journey):
    s, runs, backfill, _ = journey
    assert backfill["dag_id"] == DAG_ID
    backfilled = [d for d in BACKFILL_DATES if runs[d]["run_type"] == "backfill"]
    assert backfilled == BACKFILL_DATES
    for date in BACKFILL_DATES + [MANUAL_DATE]:
        run = runs[date]
        assert run["state"] == "success", (date, _why(s, run))
        report, page = _report(s, run)
        assert report["status"] == "passed" and report["snapshot"] == date
        assert [f["label"] for f in report["metrics"]["funnel"]] == ["ingested", "quality", "dedup"]
        assert f"snapshot={date}" in page and "PASSED" in page
        # The report is pushed to XCom for the UI plugin and linked from the task.
        ti = s.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run['dag_run_id'])}/taskInstances/validate")
        assert ti["state"] == "success"
        link = s.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run['dag_run_id'])}"
                                f"/taskInstances/validate/links")
        assert "/curation/report/" in json.dumps(link), link
    # Metrics went through Airflow's Stats to the StatsD listener: rows kept/dropped, shards, stage seconds.
    names = {line.split(":", 1)[0] for line in s.statsd.lines}
    for name in ("airflow.curation.preprocess.rows_kept", "airflow.curation.preprocess.rows_dropped",
                 "airflow.curation.dedup.shards_done", "airflow.curation.ingest.shards_failed",
                 "airflow.curation.ingest.stage_seconds", "airflow.curation.validate.checks_failed"):
        assert name in names, (name, sorted(n for n in names if "curation" in n))
    # OpenLineage: the validate task's COMPLETE events carry the checks and the view's metrics as facets.
    events = [json.loads(line) for line in (s.home / "openlineage.jsonl").read_text().splitlines() if line.strip()]
    done = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".validate")]
    assert len(done) >= 4, [e["job"]["name"] for e in events][:20]
    inp = done[0]["inputs"][0]
    assert inp["name"].split("/")[-2:][0] == "journey" and "snapshot=" in inp["name"]
    assert {a["assertion"] for a in inp["facets"]["dataQualityAssertions"]["assertions"]} >= {"accounting", "min_rows"}
    assert inp["inputFacets"]["dataQualityMetrics"]["rowCount"] == 120
    assert done[0]["outputs"][0]["name"].endswith("report.html")
    # The curated Asset got one event per successful run.
    events = s.request("GET", "/api/v2/assets/events?limit=100")["asset_events"]
    assert len([e for e in events if e["source_dag_id"] == DAG_ID]) >= 4


def test_stricter_param_fails_the_run_with_a_readable_message(journey):
    s, runs, _, _ = journey
    run = runs[FAILING_DATE]
    assert run["state"] == "failed"
    report, page = _report(s, run)
    assert report["status"] == "failed" and "FAILED" in page
    ti = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run['dag_run_id'])}/taskInstances/validate"
    tinst = s.request("GET", ti)
    assert tinst["state"] == "failed"
    # The last try's log (a deferral race may have cost a first try; see the DAG's retries).
    status, text = s.get_text(f"{ti}/logs/{max(tinst['try_number'], 1)}?full_content=true")
    assert status == 200 and "[FAIL] min_rows" in text and "expected >= 100000" in text


def test_plugin_serves_the_report_only_to_authorised_users(journey):
    s, runs, _, _ = journey
    run = runs[BACKFILL_DATES[0]]
    path = f"/curation/report/{DAG_ID}/{quote(run['dag_run_id'], safe='')}"
    status, text = s.get_text(path)
    assert status == 200 and f"snapshot={BACKFILL_DATES[0]}" in text and "<svg" in text
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(s.url + path, timeout=30)
    assert e.value.code in (401, 403)
    status, text = s.get_text("/curation/")  # the Browse menu's list of reports
    assert status == 200 and all(quote(runs[d]["dag_run_id"], safe="") in text or runs[d]["dag_run_id"] in text
                                 for d in BACKFILL_DATES)
    status, text = s.get_text(f"/curation/report/{DAG_ID}/no-such-run")
    assert status == 404 and "no curation report" in text.lower()


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--disable-extensions", "--no-first-run",
              "--window-size=1500,1000"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def test_ui_in_chromium_grid_and_report(journey):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    s, runs, _, _ = journey
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    d = _browser()
    try:
        wait = WebDriverWait(d, 90)
        d.get(s.url + "/")
        user = wait.until(EC.presence_of_element_located((By.NAME, "username")))
        user.send_keys(USER)
        pw = d.find_element(By.NAME, "password")
        pw.send_keys(PASSWORD)
        pw.send_keys(Keys.ENTER)
        wait.until(lambda drv: "/auth/login" not in drv.current_url and "login" not in drv.current_url.lower())

        d.get(f"{s.url}/dags/{DAG_ID}")
        wait.until(lambda drv: DAG_ID in drv.find_element(By.TAG_NAME, "body").text)
        wait.until(lambda drv: "make_shards" in drv.find_element(By.TAG_NAME, "body").text)
        time.sleep(2)  # let the grid's bars paint before the screenshot
        d.save_screenshot(str(ARTIFACTS / "journey_dag_grid.png"))
        body = d.find_element(By.TAG_NAME, "body").text
        assert DAG_ID in body and "validate" in body

        run = runs[BACKFILL_DATES[1]]
        # The run's page has the plugin's "Curation report" tab (external view, iframe).
        d.get(f"{s.url}/dags/{DAG_ID}/runs/{quote(run['dag_run_id'], safe='')}")
        wait.until(lambda drv: "Curation report" in drv.find_element(By.TAG_NAME, "body").text)
        d.find_element(By.XPATH, "//*[normalize-space(text())='Curation report']").click()
        frame = wait.until(EC.presence_of_element_located((By.TAG_NAME, "iframe")))
        time.sleep(2)
        d.save_screenshot(str(ARTIFACTS / "journey_run_report_tab.png"))
        d.switch_to.frame(frame)
        wait.until(lambda drv: "Curation report" in drv.find_element(By.TAG_NAME, "body").text)
        text = d.find_element(By.TAG_NAME, "body").text
        assert f"snapshot={BACKFILL_DATES[1]}" in text and "PASSED" in text and "Curation funnel" in text
        d.switch_to.default_content()

        # The report page on its own, served by the plugin with the UI's session cookie.
        d.get(f"{s.url}/curation/report/{DAG_ID}/{quote(run['dag_run_id'], safe='')}")
        wait.until(lambda drv: "Curation funnel" in drv.find_element(By.TAG_NAME, "body").text)
        d.save_screenshot(str(ARTIFACTS / "journey_report.png"))
        text = d.find_element(By.TAG_NAME, "body").text
        assert "PASSED" in text and "quality" in text and "clusters" in text
        assert len(d.find_elements(By.TAG_NAME, "svg")) >= 4
    finally:
        d.quit()


def test_real_stages_ingest_preprocess_dedup_validate(journey):
    """The same operators the pipeline DAG uses, on real text: the report's funnel is the stages' own books."""
    s, _, _, run = journey
    assert run["state"] == "success", _why(s, run, STAGES_DAG)
    base = s.lake / "stages" / f"snapshot={MANUAL_DATE}" / "_manifests" / sanitize_run_id(run["dag_run_id"])
    report = json.loads((base / "report.json").read_text())
    assert report["status"] == "passed", report["summary"]
    funnel = {f["label"]: f["rows"] for f in report["metrics"]["funnel"]}
    ingest = json.loads((base / "ingest.json").read_text())
    pre = json.loads((base / "preprocess.json").read_text())
    assert ingest["accounting"]["read"] == 51  # every input line is accounted for, the empty one too
    assert funnel["ingested"] == ingest["accounting"]["kept"] == sum(sh["rows"] for sh in ingest["shards"])
    assert funnel["quality"] == pre["accounting"]["kept"] < funnel["ingested"]
    assert report["metrics"]["duplicates"]["duplicates"] >= 8 and funnel["dedup"] < funnel["quality"]
    assert set(report["stages"]) >= {"ingest", "preprocess", "dedup"}
