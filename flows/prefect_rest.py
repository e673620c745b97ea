"""Recording a finished run in the Prefect API over its REST interface, without importing Prefect.

Used for a run answered wholly from the store (flows/stored_run.py): importing Prefect and running one flow through
its engine costs more than the whole run (docs/benchmarks.md, "Startup"), but the run must still be in the UI as
a `mai-run` flow run with its logs and artifacts. Only for a Prefect server that `mai` started itself (the local
or a temporary one, flows/local_server.py): no authentication, and the same API version as the installed client.
The endpoints are Prefect 3's (`/flows/`, `/flow_runs/`, `/flow_runs/{id}/set_state`, `/logs/`, `/artifacts/`).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

TIMEOUT_S = 10.0

ArtifactType = Literal["markdown", "table", "progress"]


class PrefectApiError(RuntimeError):
    """The Prefect API refused or did not answer a request."""


@dataclass(frozen=True)
class Artifact:
    key: str
    type: ArtifactType
    data: str | float          # markdown text, a table as JSON rows, a progress percentage
    description: str


@dataclass
class RecordedFlowRun:
    """A flow run created in the Running state; `log` and `artifact` collect what `finish` sends."""

    url: str
    flow_run_id: str
    logs: list[tuple[int, str, str]] = field(default_factory=list)  # level, message, ISO timestamp
    artifacts: list[Artifact] = field(default_factory=list)

    def log(self, level: int, message: str) -> None:
        self.logs.append((level, message, datetime.now(UTC).isoformat()))
        logging.getLogger("mai").log(level, message)

    def finish(self, completed: bool, message: str | None = None) -> None:
        """Sends the logs and artifacts, then the final state (Completed, or Failed with `message`)."""
        if self.logs:
            _post(self.url, "/logs/", [{"name": "mai", "level": level, "message": text, "timestamp": at,
                                        "flow_run_id": self.flow_run_id} for level, text, at in self.logs])
        for artifact in self.artifacts:
            _post(self.url, "/artifacts/", {"key": artifact.key, "type": artifact.type, "data": artifact.data,
                                            "description": artifact.description, "flow_run_id": self.flow_run_id})
        state = {"type": "COMPLETED", "name": "Completed"} if completed else \
            {"type": "FAILED", "name": "Failed", "message": message or ""}
        _post(self.url, f"/flow_runs/{self.flow_run_id}/set_state", {"state": state, "force": True})


def start_flow_run(url: str, flow_name: str, run_name: str, tags: list[str], parameters: dict[str, object]
                   ) -> RecordedFlowRun:
    """Creates (or finds) the flow and creates a Running flow run of it named `run_name`."""
    flow = _post(url, "/flows/", {"name": flow_name})
    created = _post(url, "/flow_runs/", {"flow_id": flow["id"], "name": run_name, "tags": tags,
                                         "parameters": parameters,
                                         "state": {"type": "RUNNING", "name": "Running"}})
    return RecordedFlowRun(url=url, flow_run_id=str(created["id"]))


def _post(url: str, path: str, body: object) -> dict[str, object]:
    request = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body, default=str).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            text = response.read()
    except urllib.error.HTTPError as error:
        raise PrefectApiError(f"the Prefect API at {url} refused {path}: HTTP {error.code} "
                              f"{error.read()[:300].decode(errors='replace')}") from error
    except (urllib.error.URLError, OSError) as error:
        raise PrefectApiError(f"the Prefect API at {url} does not answer ({error})") from error
    answer = json.loads(text) if text else {}
    return answer if isinstance(answer, dict) else {}
