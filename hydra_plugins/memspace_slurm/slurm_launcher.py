"""The project's SLURM launcher (`hydra/launcher=slurm`): Hydra's submitit launcher, with the
scheduler's failures named. (Hydra instantiates launchers only from the hydra_plugins package.)

WHY: the plugin as shipped raises at the first job that failed, as a traceback, while the other
jobs still run, and a job the scheduler can never start pends for ever. Here the submission
stops with the scheduler's own message when sbatch refuses the jobs (no such partition, more
CPUs than a node has) or when a job waits for a reason that never passes (exit 2); every job is
waited for, and each one that failed is named with its shard, its exit code and the line that
says why, then the command exits with the jobs' code (3 when a shard stopped on an environment
failure, as a local stage does). A job the scheduler preempts or requeues is still running as
far as this command is concerned: it waits, and the job resumes its slice of the stage folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import filter_overrides
from omegaconf import OmegaConf

try:
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as PluginLauncher
except ImportError:  # without the cluster extra: nothing to extend, and Hydra's plugin scan stays quiet
    PluginLauncher = object

from harness.failures import BAD_INPUT, STOPPED

# pending reasons that no amount of waiting resolves (squeue's %r) on a cluster that accepts such jobs
NEVER = {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionDown", "BadConstraints",
         "InvalidAccount", "InvalidQOS", "QOSMaxCpuPerJobLimit", "AssocMaxCpuPerJobLimit"}


def _squeue_reasons(job_ids: list[str]) -> tuple[dict[str, tuple[str, str]] | None, str]:
    """Job id -> (state, reason) of those still queued; None (and squeue's message) when it cannot answer."""
    try:
        r = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(job_ids)], capture_output=True,
                           text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, "squeue did not answer within 60 s"
    if r.returncode:
        return None, " ".join((r.stderr or r.stdout).split())[:300]
    out = {}
    for line in r.stdout.splitlines():
        jid, state, reason = (line.split("|") + ["", ""])[:3]
        out[jid] = (state, reason)
    return out, ""


# states in which a job has not ended: the accounting (slurmdbd) learns the end after the queue has dropped the job
NOT_ENDED = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "COMPLETING",
             "CONFIGURING", "SIGNALING", "STAGE_OUT", "UNKNOWN"}


def _ended(job_id: str, patience_s: float = 60.0) -> tuple[str, int | None]:
    """How the job's last start ended, from the accounting: (state, exit code). Called once the queue no longer
    lists the job; the accounting may still say RUNNING then (seen: a shard that stopped with exit 3 read as
    `RUNNING with exit code 0`, so the command exited 1), so it is asked again until it names an end, for at most
    `patience_s`."""
    deadline = time.monotonic() + patience_s
    while True:
        r = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State,ExitCode", "-j", job_id], capture_output=True,
                           text=True, timeout=60)
        lines = [x.split("|") for x in r.stdout.splitlines() if "|" in x]
        state, code = (lines[-1][0].strip() or "UNKNOWN", lines[-1][1].split(":")[0]) if lines else ("UNKNOWN", "")
        ended = state.split()[0] not in NOT_ENDED  # "CANCELLED by 0" has ended
        if ended or time.monotonic() >= deadline:
            return state, int(code) if code.isdigit() and ended else None
        time.sleep(0.5)


def _why(stderr: str | None) -> str:
    """The line of a job's error stream that says why it stopped (the driver's `stopped:` line)."""
    lines = [x.strip() for x in (stderr or "").splitlines() if x.strip()]
    said = [x for x in lines if x.startswith(("stopped:", "error:")) or "Error:" in x or "CANCELLED" in x]
    return (said or lines or ["(no error output)"])[-1][:600]


class SlurmLauncher(PluginLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int):
        import submitit

        assert self.config is not None and job_overrides
        params = dict(self.params)
        limit_s, warn_s = int(params.get("timeout_min") or 0) * 60, int(params.get("signal_delay_s") or 0)
        if limit_s and warn_s >= limit_s:  # told "out of time" at its first check: no job would get anywhere
            print(f"error: hydra.launcher.timeout_min={limit_s // 60} is not longer than the warning the job gets "
                  f"before its time limit (hydra.launcher.signal_delay_s={warn_s}): every job would be stopped "
                  "as out of time at once; ask for more time or a shorter signal_delay_s", file=sys.stderr)
            sys.exit(BAD_INPUT)
        init = {"folder": params.pop("submitit_folder")}
        if "max_num_timeout" in params:
            init["slurm_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(cluster="slurm", **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        args = [(list(o), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}",
                 Singleton.get_state()) for i, o in enumerate(job_overrides)]
        try:
            jobs = executor.map_array(self, *zip(*args))
        except submitit.core.utils.FailedJobError as exc:  # sbatch refused: its own message
            print(f"error: the scheduler refused the jobs: {' '.join(str(exc).split())}", file=sys.stderr)
            sys.exit(BAD_INPUT)
        common = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
        names = [" ".join(filter_overrides([x for x in o if x not in common])) for o in job_overrides]  # what differs
        print(f"submitted {len(jobs)} job(s) to SLURM: {', '.join(j.job_id for j in jobs)} "
              f"(squeue -j {jobs[0].job_id.split('_')[0]}; logs under {init['folder']})", file=sys.stderr)
        self._wait(jobs, names)
        results, failed = [], []
        for job, name in zip(jobs, names):
            if job.paths.result_pickle.exists():
                results.append(job.results()[0])  # a job whose task raised comes back as a failed JobReturn
                continue
            state, code = _ended(job.job_id)
            failed.append((job, name, code))
            print(f"error: job {job.job_id} ({name}) ended {state} with exit code {code}: {_why(job.stderr())}",
                  file=sys.stderr)
        if failed:
            codes = {c for _, _, c in failed}
            print(f"{len(failed)} of {len(jobs)} job(s) did not finish; fix the cause and run the same command: "
                  "what is recorded stays, the rest runs", file=sys.stderr)
            sys.exit(codes.pop() if len(codes) == 1 and None not in codes and 0 not in codes else 1)
        return results

    @staticmethod
    def _wait(jobs: list[Any], names: list[str]) -> None:
        """Until no job is in the queue (a preempted or requeued one is: pending again); a job pending for a
        reason that never passes is cancelled, with the reason."""
        ids = [j.job_id for j in jobs]
        patience = float(os.environ.get("MEMSPACE_SLURM_PATIENCE_S", "300"))
        unanswered = None  # since when squeue has failed, one failure after another
        while True:
            queued, said = _squeue_reasons(ids)
            if queued is None:  # the controller restarting, or gone (make cluster-down): not for ever
                unanswered = unanswered if unanswered is not None else time.monotonic()
                if time.monotonic() - unanswered >= patience:
                    print(f"error: the scheduler has not answered for {patience:.0f} s ({said}); jobs "
                          f"{', '.join(ids)} may still be running (squeue and sacct show them once SLURM is back); "
                          "then run the same command: what is recorded stays, the rest runs", file=sys.stderr)
                    sys.exit(STOPPED)
            else:
                unanswered = None
            if queued is not None and not set(queued) & set(ids):
                return
            for jid, (state, reason) in (queued or {}).items():
                if state == "PENDING" and reason in NEVER:
                    subprocess.run(["scancel", *{i.split("_")[0] for i in ids}], capture_output=True)
                    name = next((n for i, n in zip(ids, names) if i == jid), jid)
                    print(f"error: the scheduler cannot start job {jid} ({name}): it pends with reason {reason} "
                          "(a partition, node or account limit the request exceeds); cancelled the jobs",
                          file=sys.stderr)
                    sys.exit(BAD_INPUT)
            time.sleep(0.5)
