"""One local[2] SparkSession for every pipeline test: starting Spark costs seconds, a query a fraction of one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from groupcoord.pipeline import session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    spark = session.build("local[2]", app_name="groupcoord-pipeline-tests")
    yield spark
    spark.stop()
