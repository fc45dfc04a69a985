"""The gRPC serving layer of function-klutch-local: a RunFunctionRequest in, the composers'
resources out, with readiness and connection details taken from what Crossplane observed.

Crossplane dials the endpoint of the function's active FunctionRevision with its client
certificate (crossplane internal/xfn/function_runner.go ``getClientConn``); the server requires
that certificate (mTLS), as a function pod does. The SDK (crossplane-function-sdk-python) serves
both the v1 and v1beta1 RunFunction services, so Crossplane 1.20 and 2.x can call it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import grpc
from crossplane.function import resource, response, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from klutch_local.function.composers import connection_details, is_ready
from klutch_local.function.registry import compose

NAME = "function-klutch-local"
log = logging.getLogger(NAME)


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """One pipeline step: the desired composed resources (Ready from the observed ones' Ready
    condition) and the composite's connection details; a composite the composers cannot
    compose is a fatal result naming the field."""
    rsp = response.to(req)
    xr = resource.struct_to_dict(req.observed.composite.resource)
    step_input = resource.struct_to_dict(req.input)
    try:
        desired = compose(xr, step_input)
        ready = {name: is_ready(observed(req, name), step_input) for name in desired}
    except ValueError as error:  # CompositionError, or a value a composer cannot convert
        response.fatal(rsp, str(error))
        return rsp
    for name, manifest in desired.items():
        target = rsp.desired.resources[name]
        resource.update(target, manifest)
        target.ready = fnv1.Ready.READY_TRUE if ready[name] else fnv1.Ready.READY_FALSE
    observed_details = {
        name: dict(state.connection_details) for name, state in req.observed.resources.items()
    }
    for key, value in connection_details(step_input, observed_details).items():
        rsp.desired.composite.connection_details[key] = value
    return rsp


def observed(req: fnv1.RunFunctionRequest, name: str) -> dict[str, Any] | None:
    """The observed composed resource ``name``, or None before Crossplane created it."""
    if name not in req.observed.resources:
        return None
    return resource.struct_to_dict(req.observed.resources[name].resource)


class Runner(grpcv1.FunctionRunnerServiceServicer):
    """The servicer the SDK's runtime serves."""

    async def RunFunction(
        self,
        req: fnv1.RunFunctionRequest,
        _: grpc.aio.ServicerContext[fnv1.RunFunctionRequest, fnv1.RunFunctionResponse],
    ) -> fnv1.RunFunctionResponse:
        rsp = run(req)
        xr = resource.struct_to_dict(req.observed.composite.resource)
        log.info(
            "%s %s: %s",
            xr.get("kind"),
            (xr.get("metadata") or {}).get("name"),
            ", ".join(rsp.desired.resources) or "; ".join(r.message for r in rsp.results),
        )
        return rsp


def main(argv: list[str] | None = None) -> None:
    """Serve on ``--address`` with the mTLS files of ``--tls-dir`` (tls.crt, tls.key: the
    server's; ca.crt: the CA of Crossplane's client certificate)."""
    parser = argparse.ArgumentParser(prog=f"python -m klutch_local.function ({NAME})")
    parser.add_argument("--address", required=True, help="host:port, e.g. 127.0.0.1:9443")
    parser.add_argument("--tls-dir", required=True, type=Path, help="ca.crt, tls.crt, tls.key")
    args = parser.parse_args(argv)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        if not (args.tls_dir / name).is_file():
            parser.error(f"--tls-dir {args.tls_dir}: {name} is missing")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    log.info("serving on %s", args.address)
    runtime.serve(
        Runner(), args.address, creds=runtime.load_credentials(str(args.tls_dir)), insecure=False
    )
