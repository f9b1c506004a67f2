"""The operator library: each module is one family of operators, added to ``Stream`` as
methods (as timely's extension traits add methods to its streams)."""
from ..dataflow import Stream
from . import aggregation, arrow, basic, capture, exchange, timing
from .basic import Err, Ok
from .capture import Capture

_METHODS = {
    basic: ["map", "flat_map", "filter", "inspect", "inspect_time", "inspect_batch", "concat",
            "partition", "branch", "ok_err"],
    exchange: ["exchange", "broadcast"],
    timing: ["delay", "delay_total", "reclock"],
    aggregation: ["accumulate", "count", "aggregate", "state_machine"],
    capture: ["probe", "probe_with", "capture"],
    arrow: ["map_batches", "filter_batches", "aggregate_batches", "join_batches", "to_arrow",
            "from_arrow"],
}

for _module, _names in _METHODS.items():
    for _name in _names:
        setattr(Stream, _name, getattr(_module, _name))

__all__ = ["Capture", "Err", "Ok"]
