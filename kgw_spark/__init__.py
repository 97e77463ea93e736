"""Spark integration: the ``kgw`` Python data source and the audit report job.

Both need the ``spark`` extra (pyspark, pyarrow, pandas); nothing else in kgw
imports this package.  See the README section "Spark".
"""
