"""The JSON log line: what log pipelines parse without a custom pattern."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from gateway.logs import JsonFormatter


def test_json_time_is_rfc3339_utc_with_milliseconds():
    record = logging.LogRecord("kgw.test", logging.INFO, __file__, 1, "hello %s", ("there",), None)
    record.created = 1795647708.0459  # 2026-11-25T23:01:48.045Z
    record.kgw = {"listener": "SASL", "client_id": None}
    line = json.loads(JsonFormatter().format(record))
    assert line["time"] == "2026-11-25T23:01:48.045Z"
    parsed = datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
    assert parsed.tzinfo == timezone.utc and abs(parsed.timestamp() - record.created) < 0.001
    assert line["msg"] == "hello there" and line["listener"] == "SASL" and "client_id" not in line
