"""What `kvdoctor serve` evaluates with: the pipeline and its what-if workers, and the state the sinks read."""

from __future__ import annotations

from kvdoctor.config import Config
from kvdoctor.pipeline import Pipeline
from kvdoctor.rules.loader import RuleGroup
from kvdoctor.status.state import DaemonState
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.headroom import HeadroomWorker
from kvdoctor.whatif.jobs import MAX_QUEUE
from kvdoctor.whatif.offload import shared


def daemon_state(cfg: Config) -> DaemonState:
    """The daemon's state; the page's charts keep a point a cycle for at most the retention (and 240 points)."""
    return DaemonState(min(240, int(cfg.retention_s / max(cfg.interval_s, 1e-3)) + 1))


def daemon_pipeline(cfg: Config, groups: list[RuleGroup]) -> Pipeline:
    """The pipeline with its advisor and headroom workers on threads of their own: a cycle never waits for them."""
    # the snapshots predictions learn from are kept no longer than the series (memory bounded by the retention)
    # their simulations run in a child process at nice 19: on a shared core they take what the cycle leaves
    advisor = Advisor(background=True, history_s=min(900.0, cfg.retention_s), offload=shared())
    # SLO headroom for autoscalers, same history; its queue holds a refresh of a fleet of thousands (a request is
    # a few hundred bytes): 256 would drop three quarters of a 1,000-target fleet's first refresh into retries
    headroom = HeadroomWorker(
        advisor.snaps, background=True, max_queue=MAX_QUEUE, offload=shared(), recall=advisor.ledger.recall
    )
    pipeline = Pipeline(groups, retention_s=cfg.retention_s, job=cfg.job, advisor=advisor, headroom=headroom)
    pipeline.runbook_url = cfg.runbook_page()
    pipeline.idle_after_s = cfg.idle_after_s
    return pipeline
