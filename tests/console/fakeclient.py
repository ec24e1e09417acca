"""An in-memory admin client with the same methods as `monarch.admin.AdminClient`, for the
model and widget unit tests only (the Pilot tests of keys run against a real job)."""

from __future__ import annotations

import copy
from typing import Any


def topology() -> dict[str, Any]:
    """A job with a 4-proc trainer mesh (one rank failed) and a 2-proc generator mesh."""
    procs = [{"proc": "controller", "procs": "ctl", "rank": 0, "pid": 100, "state": "running",
              "address": "ipc://ctl", "host": "box", "status": None, "meshes": [],
              "point": {}, "counters": {"messages": 0}}]
    procs += [{"proc": f"p1.{r}", "procs": "p1", "rank": r, "pid": 1000 + r,
               "state": "failed" if r == 3 else "running", "address": f"ipc://p1.{r}",
               "host": "box", "status": -9 if r == 3 else None, "meshes": ["m1"],
               "point": {"gpus": r}, "counters": {"messages": 10 * r}} for r in range(4)]
    procs += [{"proc": f"p2.{r}", "procs": "p2", "rank": r, "pid": 2000 + r, "state": "running",
               "address": f"ipc://p2.{r}", "host": "box", "status": None, "meshes": ["m2"],
               "point": {"gpus": r}, "counters": {"messages": 5}} for r in range(2)]
    trainers = [{"rank": r, "proc": f"p1.{r}", "state": "failed" if r == 3 else "running",
                 "label": "", "point": {"gpus": r}, "messages": 10 * r, "queue_depth": r,
                 "latency_p50_ms": 1.5, "last_method": "train",
                 "failure": "Traceback...\nRuntimeError: boom" if r == 3 else None}
                for r in range(4)]
    gens = [{"rank": r, "proc": f"p2.{r}", "state": "running", "label": "", "point": {"gpus": r},
             "messages": 5, "queue_depth": 0, "latency_p50_ms": 0.5, "last_method": "generate",
             "failure": None} for r in range(2)]
    failure = {"mesh": "m1", "mesh_name": "trainers", "rank": 3, "class_name": "Trainer",
               "proc": "p1.3", "host": "box", "pid": 1003, "exit_code": None, "signal": 9,
               "reason": "Killed(sig=9)", "report": "The proc p1.3 of proc mesh p1 has failed",
               "time": 0.0, "owner_id": None}
    return {"hosts": [{"id": "local", "hostname": "box", "procs": procs}],
            "meshes": [{"mesh": "m1", "name": "trainers", "class_name": "Trainer",
                        "owner_id": None, "procs": "p1",
                        "extent": {"labels": ["gpus"], "sizes": [4]}, "actors": trainers},
                       {"mesh": "m2", "name": "generators", "class_name": "Generator",
                        "owner_id": None, "procs": "p2",
                        "extent": {"labels": ["gpus"], "sizes": [2]}, "actors": gens}],
            "failures": [failure]}


def fold(topo: dict[str, Any], rows: Any) -> dict[str, Any]:
    """`topo` as the job sends it for `AdminClient.topology(rows=rows)`: every mesh not named
    in `rows` folded (a summary by host, its actors not simply running or on a host `rows`
    names as `<mesh>@<host>`, each rank's proc).
    The summary's latency is its actors' largest median here (the job's merges histograms)."""
    topo = copy.deepcopy(topo)
    host_of = {p["proc"]: h["id"] for h in topo["hosts"] for p in h["procs"]}
    for mesh in topo["meshes"]:
        if mesh["mesh"] in rows or mesh["name"] in rows:
            continue
        actors = mesh.pop("actors")
        hosts: dict[str, dict[str, Any]] = {}
        for a in actors:
            summary = hosts.setdefault(host_of[a["proc"]], {
                "actors": 0, "states": {}, "messages": 0, "queue_depth": 0,
                "latency_p50_ms": None, "last_method": None, "stalled": 0})
            summary["actors"] += 1
            summary["states"][a["state"]] = summary["states"].get(a["state"], 0) + 1
            summary["messages"] += a.get("messages") or 0
            summary["queue_depth"] += a.get("queue_depth") or 0
            if a.get("latency_p50_ms") is not None:
                summary["latency_p50_ms"] = max(summary["latency_p50_ms"] or 0.0,
                                                a["latency_p50_ms"])
            summary["last_method"] = a.get("last_method") or summary["last_method"]
            summary["stalled"] += bool(a.get("stalled"))
        open_hosts = {r.split("@", 1)[1] for r in rows if r.startswith(mesh["mesh"] + "@")}
        mesh["actors"] = [a for a in actors if a["state"] != "running" or a.get("stalled")
                          or a.get("failure") or host_of[a["proc"]] in open_hosts]
        mesh["folded"] = hosts
        mesh["rank_procs"] = [[a["rank"], a["proc"]] for a in actors]
        mesh["open_hosts"] = sorted(open_hosts & set(hosts))
    return topo


class FakeClient:
    """Answers from `topology()`; records the actions it was asked."""

    def __init__(self) -> None:
        self.topo = topology()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.rows_asked: list[Any] = []
        """The `rows` of every topology asked (None: every mesh's actors)."""
        self.session_list: list[dict[str, Any]] = []
        self.log_records: list[dict[str, Any]] = []
        self.pdb_output: dict[int, str] = {}
        self.closed: set[int] = set()

    def job(self) -> dict[str, Any]:
        return {"job_id": "job-1", "pid": 100, "hostname": "box", "address": "tcp://127.0.0.1:1",
                "started": 0.0, "uptime_s": 65.0, "health": "degraded",
                "counts": {"hosts": 1, "procs": 7, "procs_live": 6, "meshes": 2, "actors": 6,
                           "failures": 1}}

    def topology(self, rows: Any = None) -> dict[str, Any]:
        self.rows_asked.append(rows)
        return copy.deepcopy(self.topo) if rows is None else fold(self.topo, rows)

    def sessions(self) -> list[dict[str, Any]]:
        return [s for s in self.session_list if s["id"] not in self.closed]

    def spans(self, trace_id: Any = None, mesh: Any = None, limit: int = 200) -> list[Any]:
        return [{"name": "Trainer.train", "mesh": "trainers", "rank": r, "start_ns": 0,
                 "end_ns": 1, "duration_ms": 1.5 * (r + 1), "outcome": "ok"} for r in range(3)]

    def transfers(self, window: float = 10.0) -> dict[str, Any]:
        hist = [float(i % 5) * 1e6 for i in range(60)]
        return {"window": window, "bucket_s": 1.0,
                "total": {"bytes": 4 << 20, "count": 4, "bytes_per_s": 2e6, "history": hist},
                "meshes": [{"mesh": "trainers", "bytes": 4 << 20, "count": 4,
                            "bytes_per_s": 2e6, "history": hist}],
                "links": [{"src": "p1.0", "dst": "p2.0", "bytes": 4 << 20, "count": 4,
                           "bytes_per_s": 2e6, "history": hist}], "kinds": []}

    def logs(self, mesh: Any = None, rank: Any = None, text: Any = None, since_hlc: Any = None,
             limit: int = 500) -> list[dict[str, Any]]:
        return [r for r in self.log_records if (since_hlc is None or r["hlc"] > since_hlc)]

    def kill(self, mesh: str, selection: str, sig: str = "KILL") -> dict[str, Any]:
        self.calls.append(("kill", (mesh, selection)))
        return {"mesh": mesh, "signal": "SIGKILL", "killed": [], "skipped": []}

    def stop(self, mesh: str, selection: str) -> dict[str, Any]:
        self.calls.append(("stop", (mesh, selection)))
        return {"mesh": mesh, "done": True, "stopped": []}

    def stack(self, proc: str) -> str:
        self.calls.append(("stack", (proc,)))
        return f"Process 1001: python\nThread 1 (active): \"MainThread\"\n    loop ({proc})\n"

    def diagnose(self) -> dict[str, Any]:
        return {"ok": True, "checks": [{"check": "ping", "proc": "p1.0", "pid": 1000,
                                        "latency_ms": 1.2, "status": "pass", "error": None}],
                "dead": []}

    def break_next(self, mesh: str, rank: int) -> dict[str, Any]:
        self.calls.append(("break_next", (mesh, rank)))
        return {"mesh": mesh, "rank": rank, "proc": "p1.0"}

    def continue_all(self) -> int:
        self.calls.append(("continue_all", ()))
        return len(self.sessions())

    def send(self, session_id: int, line: str) -> bool:
        self.calls.append(("send", (session_id, line)))
        out = "--Return--\n" if line == "c" else f"{line!r} evaluated\n(Pdb) "
        if line == "c":
            self.closed.add(session_id)
        self.pdb_output[session_id] = self.pdb_output.get(session_id, "") + out
        return True

    def read(self, session_id: int, offset: int, timeout: float) -> tuple[str, int, bool]:
        text = self.pdb_output.get(session_id, "> work()\n(Pdb) ")
        self.pdb_output.setdefault(session_id, text)
        return text[offset:], len(text), session_id in self.closed
