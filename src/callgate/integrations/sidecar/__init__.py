"""The callgate sidecar: the kernel behind an HTTP API, so that an agent in any language (or a
gateway) reaches its tools only through the monitor's process.

``callgate serve`` runs it; ``callgate.client`` talks to it. One module per concept: routes
(``_app``), operations over the kernel (``_service``), keys (``_keys``), receipts
(``_receipts``), approvals (``_approvals``), run persistence (``_runs``), gateway decision
points (``_gateways``), metrics (``_metrics``), request parsing (``_requests``), the OpenAPI
document (``_openapi``) and the server (``_server``). See docs/sidecar.md.
"""

from __future__ import annotations

from typing import Any

from callgate.integrations.sidecar._keys import Identity, KeyRing, add_key, revoke_key
from callgate.integrations.sidecar._receipts import canonical_json, verify_receipt

__all__ = ["Identity", "KeyRing", "add_key", "canonical_json", "revoke_key", "serve",
           "verify_receipt"]


def serve(*args: Any, **kwargs: Any) -> int:
    """Run the sidecar (``callgate serve``); see ``_server.serve``. Needs the ``server`` extra."""
    from callgate.integrations.sidecar._server import serve as run

    return run(*args, **kwargs)
