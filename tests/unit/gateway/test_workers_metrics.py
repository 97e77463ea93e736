"""The supervisor's /metrics (kgw run --workers N): every worker's samples labelled, each
family's samples kept together as the exposition format requires."""

from __future__ import annotations

from gateway.process.workers import _merge_exposition

W0 = """# HELP kgw_connections_active Open client connections
# TYPE kgw_connections_active gauge
kgw_connections_active{listener="A"} 3.0
# HELP kgw_up x
# TYPE kgw_up gauge
kgw_up 1.0
"""
W1 = """# HELP kgw_connections_active Open client connections
# TYPE kgw_connections_active gauge
kgw_connections_active{listener="A"} 5.0
kgw_connections_active{} 0.0
# HELP kgw_up x
# TYPE kgw_up gauge
kgw_up 1.0
"""


def test_samples_are_labelled_per_worker_and_grouped_per_family():
    families: dict = {}
    samples: dict = {}
    _merge_exposition(W0, 'worker="0"', families, samples)
    _merge_exposition(W1, 'worker="1"', families, samples)
    assert list(families) == ["kgw_connections_active", "kgw_up"]
    assert families["kgw_up"] == ["# HELP kgw_up x", "# TYPE kgw_up gauge"]
    assert samples["kgw_connections_active"] == [
        'kgw_connections_active{worker="0",listener="A"} 3.0',
        'kgw_connections_active{worker="1",listener="A"} 5.0',
        'kgw_connections_active{worker="1"} 0.0',
    ]
    assert samples["kgw_up"] == ['kgw_up{worker="0"} 1.0', 'kgw_up{worker="1"} 1.0']
