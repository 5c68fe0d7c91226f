"""Proof claims: concurrent runs on one store prove a template once.

A process about to prove a template records a claim (template hash, toolchain, its host and pid)
in the store; the others wait for a certificate to appear and reuse it. A claim whose process is
gone (same host, pid no longer running) or whose lease ran out is taken over, so a run killed in
the middle of a proof delays the others but never blocks them. Proving twice stays correct; only
time is lost, so the lease errs long."""
from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from formloop.population.certify import is_settled

HOST = socket.gethostname()


@dataclass
class ProofClaim:
    """What `claim_proof` found. owned: this process must prove the template (and store the
    certificate) before leaving the block. Otherwise a stored certificate decides it: `status` is
    the template's stored status, `verdict` that certificate's, `waited_s` the time spent waiting."""

    template_hash: str
    toolchain: str
    owned: bool
    status: str | None = None
    verdict: str | None = None
    waited_s: float = 0.0
    took_over: str = ""  # the owner of a stale claim this process replaced, if any


@contextmanager
def claim(conn: sqlite3.Connection, template_hash: str, toolchain: str, *, lease_s: float, poll_s: float = 0.02,
          on_wait: Callable[[str], None] | None = None) -> Iterator[ProofClaim]:
    """Hold the claim to prove `template_hash` under `toolchain`, or learn that a proof is stored.

    Not owned when a settled certificate (proved, or refuted with a counterexample) is stored, or when
    another process stored any certificate while this one waited: its attempt is the one attempt."""
    owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    seen_id = _latest(conn, template_hash, toolchain)[0]
    told = False
    while True:
        found, took_over = _try_claim(conn, template_hash, toolchain, owner, lease_s, seen_id)
        if found is not None:
            found.waited_s = time.monotonic() - start
            yield found
            return
        if took_over is not None:
            break
        if on_wait is not None and not told:
            holder = conn.execute("SELECT owner FROM proof_claims WHERE template_hash = ? AND toolchain = ?",
                                  (template_hash, toolchain)).fetchone()
            on_wait(f"waiting for {holder[0] if holder else 'another process'} to prove {template_hash}")
            told = True
        time.sleep(poll_s)
        poll_s = min(poll_s * 1.5, 0.25)
    try:
        yield ProofClaim(template_hash, toolchain, True, waited_s=time.monotonic() - start, took_over=took_over)
    finally:
        conn.execute("DELETE FROM proof_claims WHERE template_hash = ? AND toolchain = ? AND owner = ?",
                     (template_hash, toolchain, owner))


def _try_claim(conn: sqlite3.Connection, template_hash: str, toolchain: str, owner: str, lease_s: float,
               seen_id: int) -> tuple[ProofClaim | None, str | None]:
    """(a not-owned claim, None) when a certificate decides; (None, previous owner or '') when this
    process now holds the claim; (None, None) when another live process holds it."""
    conn.execute("BEGIN IMMEDIATE")  # the check and the insert under one lock: two claimants cannot both win
    try:
        cert_id, verdict = _latest(conn, template_hash, toolchain)
        row = conn.execute("SELECT status FROM templates WHERE hash = ?", (template_hash,)).fetchone()
        status = row[0] if row else None
        if cert_id and (cert_id > seen_id or is_settled(status, verdict)):
            conn.execute("COMMIT")
            return ProofClaim(template_hash, toolchain, False, status, verdict), None
        held = conn.execute("SELECT owner, host, pid, expires_at FROM proof_claims WHERE template_hash = ? "
                            "AND toolchain = ?", (template_hash, toolchain)).fetchone()
        if held is not None and not _stale(*held[1:]):
            conn.execute("COMMIT")
            return None, None
        now = time.time()
        conn.execute("INSERT OR REPLACE INTO proof_claims (template_hash, toolchain, owner, host, pid, claimed_at, "
                     "expires_at) VALUES (?,?,?,?,?,?,?)",
                     (template_hash, toolchain, owner, HOST, os.getpid(), now, now + lease_s))
        conn.execute("COMMIT")
        return None, held[0] if held else ""
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _latest(conn: sqlite3.Connection, template_hash: str, toolchain: str) -> tuple[int, str | None]:
    row = conn.execute("SELECT id, verdict FROM certificates WHERE template_hash = ? AND toolchain = ? "
                       "ORDER BY id DESC LIMIT 1", (template_hash, toolchain)).fetchone()
    return (0, None) if row is None else (int(row[0]), row[1])


def _stale(host: str, pid: int, expires_at: float) -> bool:
    if time.time() > expires_at:
        return True
    return host == HOST and not pid_running(pid)


def pid_running(pid: int) -> bool:
    """Whether a process with this pid runs on this host (a zombie, killed but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: the signal test is all there is
    return state not in ("Z", "X")


def stale_claims(conn: sqlite3.Connection) -> list[dict]:
    """Claims whose process is gone or whose lease ran out (for the integrity report)."""
    rows = conn.execute("SELECT template_hash, toolchain, owner, host, pid, expires_at FROM proof_claims").fetchall()
    return [{"template_hash": h, "toolchain": tc, "owner": o} for h, tc, o, host, pid, exp in rows
            if _stale(host, pid, exp)]
