"""ApiVersions (key 18): the APIs and versions this listener serves, from the registry.

A request of a version newer than ours is answered (by the connection, KIP-511) with error
UNSUPPORTED_VERSION and the ranges in v0's format, and the client retries with one we know.
"""

from __future__ import annotations

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke

ApiVersionsResponse = api.response_class(18)


def version_ranges() -> list:
    return [ApiVersionsResponse.ApiVersion(api_key=r.api_key, min_version=r.min_version,
                                           max_version=r.max_version)
            for r in sorted(api.load_handlers().values(), key=lambda r: r.api_key)]


@api.handles(18, 0, 3, flexible_from=3)
async def api_versions(ctx: api.RequestContext, request):
    return ApiVersionsResponse(error_code=ke.NONE, api_keys=version_ranges(),
                               throttle_time_ms=0)
