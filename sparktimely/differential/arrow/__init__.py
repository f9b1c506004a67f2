"""The Arrow path of differential dataflow: trace batches as sorted columns, and arrange,
join and reduce as pyarrow/numpy kernels (never a Python loop per row)."""
