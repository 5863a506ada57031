"""Retry policy for the curation tasks: configuration errors fail at once, the machine's errors retry.

A bad spec (a ``ValueError``: an unknown setting, an impossible threshold), an input or lake that is not
there (``FileNotFoundError``) or a malformed manifest (``ManifestError``, a ``ValueError``) cannot be fixed by running the task again; lost
workers, timeouts and flaky storage can. ``AirflowFailException`` (failed checks, missing inputs found by
the operator itself) never retries whatever the policy says.
"""

from __future__ import annotations

from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

#: Exceptions that mean "the configuration or the data is wrong": retrying cannot help.
CONFIG_ERRORS: list[str] = ["builtins.ValueError", "builtins.TypeError", "builtins.FileNotFoundError"]

CONFIG_ERRORS_FAIL = ExceptionRetryPolicy(
    rules=[
        RetryRule(
            exception=CONFIG_ERRORS,
            action=RetryAction.FAIL,
            reason="a configuration or input error: retrying cannot fix it",
        )
    ]
)
