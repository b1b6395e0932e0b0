"""Layouts, re-exported where part authors look for them (defined in :mod:`modforge.core.layouts`)."""

from ..core.layouts import DEFAULT_SPATIAL, Layout, channel_dim, example_input, infer_layout, out_dim_of, rank_of

__all__ = ["DEFAULT_SPATIAL", "Layout", "channel_dim", "example_input", "infer_layout", "out_dim_of", "rank_of"]
