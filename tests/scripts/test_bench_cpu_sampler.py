"""benchmarks/bench_scale.py's CpuSampler on real processes: a stand-in for an Airflow process that runs a child
to its end (reaped: its CPU is in the parent's counters) and launches a stage job it never waits for (the job
ends a zombie, with an empty command line, and init reaps it once the parent is gone), each burning a known
amount of CPU. The job's CPU goes to the jobs, never to Airflow."""

from __future__ import annotations

import subprocess
import sys
import time

from bench_scale import CpuSampler

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"
# The job burns 1.5 CPU-s, then says so and idles, so that a sample sees all of it before it ends.
JOB = BURN.format(s=1.5) + "open({done!r}, 'w').close()\ntime.sleep(1.0)\n"
# The parent: waits for a line on stdin, runs a child that burns 0.5 CPU-s to its end, then launches the job
# in a session of its own without waiting for it, prints "launched" and stays until stdin closes. (Only the job's
# command line holds the marker the sampler knows a job by; the parent's code splits it.)
PARENT = """
import subprocess, sys
sys.stdin.readline()
subprocess.run([sys.executable, "-c", {child!r}], check=True)
subprocess.Popen([sys.executable, "-c", {job!r}, "airflow_curation" ".jobs"], start_new_session=True)
print("launched", flush=True)
sys.stdin.read()
"""


def test_cpu_of_a_reaped_child_goes_to_airflow_and_of_an_orphaned_job_to_the_jobs(tmp_path):
    done = tmp_path / "job-done"
    code = PARENT.format(child=BURN.format(s=0.5), job=JOB.format(done=str(done)))
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sampler = CpuSampler({parent.pid: "scheduler"}, interval=0.1)
    sampler.start()
    try:
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "launched"
        deadline = time.time() + 120
        while not done.exists():
            assert time.time() < deadline, "the job never finished burning"
            time.sleep(0.1)
        time.sleep(1.5)  # the job has ended (and been reaped by init)
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)
    totals = sampler.stop()
    assert sampler.samples > 2
    # The child's 0.5 s (plus two interpreters' start-up) is the parent's tree's; the job's 1.5 s is not.
    assert set(totals) == {"scheduler", "jobs"}
    assert 0.5 <= totals["scheduler"] < 1.5, totals
    assert totals["jobs"] >= 1.5, totals
