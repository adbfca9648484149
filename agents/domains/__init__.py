"""The Engineer's domain-specific harness edits, one module per domain (``agents/domains/<domain>.py``, a
module-level ``INTERVENTIONS`` list): edits that know a domain's answer format. ``agents.playbook.for_domain``
loads them; the evaluator's own domain package (``evotrainer/domains/``) never imports ``agents``.
"""
