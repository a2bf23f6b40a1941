"""Maintenance actions, one module each, around one narrow context (``context.ActionContext``).

``optimize``, ``vacuum``, ``backup`` and ``restore`` each take the context and their own
parameters and return an ``Outcome``: a status and the details ``ops/run_log`` keeps. What
to do is decided by pure functions in ``lakehouse.maintenance``; these modules measure the
tables and carry the decisions out.
"""
