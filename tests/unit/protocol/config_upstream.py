"""A scripted upstream for the config APIs, for in-process tests.

``ConfigBroker`` extends the gateway tests' ``FakeBroker`` with DescribeConfigs
(32) and IncrementalAlterConfigs (44) — and AlterConfigs (33) only when asked,
like tansu, which lacks it.  It records every config request it decodes and
answers per resource; ``fail`` scripts an error for a resource name and
``reverse`` answers in reverse order (to exercise merging by resource).

"""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from protocol.codecs import decode_request, encode, make, nested, response_class
from tests.unit.gateway.fake_broker import FakeBroker

CONFIG_KEYS = (32, 33, 44)


class ConfigBroker(FakeBroker):
    def __init__(self, *, alter_configs: bool = False) -> None:
        super().__init__()
        self.versions.update({32: (0, 4), 44: (0, 1)})
        if alter_configs:
            self.versions[33] = (0, 2)
        self.config_requests: list[tuple[int, int, object]] = []
        self.fail: dict[str, tuple[int, str]] = {}
        self.reverse = False
        self.topic_configs: dict[str, dict[str, str]] = {}

    def _body(self, header, body) -> bytes:
        key, version = header.api_key, header.api_version
        if key not in CONFIG_KEYS:
            return super()._body(header, body)
        request = decode_request(key, version, body, header.size)
        self.config_requests.append((key, version, request))
        cls = response_class(key, version)
        resources = list(request.resources)
        if self.reverse:
            resources.reverse()
        if key == 32:
            result_cls = nested(cls, "results")
            entry_cls = nested(result_cls, "configs")
            results = []
            for r in resources:
                code, message = self.fail.get(r.resource_name, (0, None))
                configs = () if code else tuple(
                    make(entry_cls, name=k, value=v, read_only=False, config_source=i8(1), is_sensitive=False,
                         synonyms=(), config_type=i8(2), documentation=None)
                    for k, v in sorted(self.topic_configs.get(r.resource_name, {"retention.ms": "604800000"}).items()))
                results.append(make(result_cls, error_code=ErrorCode(code), error_message=message,
                                    resource_type=r.resource_type, resource_name=r.resource_name, configs=configs))
            return encode(make(cls, throttle_time=timedelta(milliseconds=7), results=tuple(results)))
        resp_cls = nested(cls, "responses")
        out = []
        for r in resources:
            code, message = self.fail.get(r.resource_name, (0, None))
            if not code and not request.validate_only:
                stored = self.topic_configs.setdefault(r.resource_name, {})
                for c in r.configs:
                    if getattr(c, "config_operation", 0) == 1:
                        stored.pop(c.name, None)
                    else:
                        stored[c.name] = c.value
            out.append(make(resp_cls, error_code=ErrorCode(code), error_message=message,
                            resource_type=r.resource_type, resource_name=r.resource_name))
        return encode(make(cls, throttle_time=timedelta(milliseconds=7), responses=tuple(out)))
