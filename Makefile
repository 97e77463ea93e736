# Two entry points, both self-contained on a fresh machine:
#   make demo   -> set up, start a local tansu broker and kgw in front of it (make demo PORT=19192: another port)
#   make test   -> set up, run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Apache Kafka for the compatibility tests (deploy/kafka/pom.xml), resolved with Maven once
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' deploy/kafka/pom.xml)
KAFKA_HOME ?= $(HOME)/.cache/kgw/kafka-$(KAFKA_VERSION)
KAFKA_STAMP := $(KAFKA_HOME)/.resolved
# Spark's own Kafka connector, the release of the pinned PySpark (deploy/spark/pom.xml)
SPARK_VERSION := $(shell sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' deploy/spark/pom.xml)
SPARK_KAFKA_HOME ?= $(HOME)/.cache/kgw/spark-kafka-$(SPARK_VERSION)
SPARK_KAFKA_STAMP := $(SPARK_KAFKA_HOME)/.resolved

.PHONY: setup demo test test-fast bench clean certs

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark,kafka-metadata,demo]'
	touch $(STAMP)

$(KAFKA_STAMP): deploy/kafka/pom.xml
	@command -v java >/dev/null 2>&1 || { echo "make setup: java not found: install a JDK 17 (Kafka and the Java tests need it)"; exit 2; }
	@command -v mvn >/dev/null 2>&1 || { echo "make setup: mvn not found: install Maven (it resolves Apache Kafka from the Maven registry)"; exit 2; }
	mvn -q -B -f deploy/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(KAFKA_HOME)/libs
	touch $@

$(SPARK_KAFKA_STAMP): deploy/spark/pom.xml
	mvn -q -B -f deploy/spark/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 \
	  -DoutputDirectory=$(SPARK_KAFKA_HOME)/jars
	touch $@

# kcat: a client in the tests; promtool (Debian's prometheus package) checks deploy/prometheus;
# docker-compose (without the engine it recommends) checks deploy/compose.yaml; chromium renders
# the audit report in a test
DEBS := kcat prometheus docker-compose chromium
setup: $(STAMP) $(KAFKA_STAMP) $(SPARK_KAFKA_STAMP)
	@for tool in kcat promtool docker-compose chromium; do command -v $$tool >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $(DEBS)) >/dev/null; \
	  else echo "missing tools: sudo apt-get install $(DEBS)"; fi; fi

demo: setup
	KGW_KAFKA_LIBS=$(KAFKA_HOME)/libs $(VENV)/bin/kgw demo $(if $(PORT),--port $(PORT))

# what configs/examples/tls-and-sasl.yaml needs (development certificates, not for production)
certs: $(STAMP)
	$(VENV)/bin/kgw dev-certs --dir configs/examples/certs --force \
	  --host localhost --host 127.0.0.1 --host kgw.example.internal

# the tests find the resolved jars here (tests/support/kafka.py, tests/support/spark.py)
TEST_ENV := KGW_KAFKA_LIBS=$(KAFKA_HOME)/libs KGW_SPARK_KAFKA_JARS=$(SPARK_KAFKA_HOME)/jars

test: setup
	$(TEST_ENV) $(PY) -m pytest -q

test-fast: setup
	$(TEST_ENV) $(PY) -m pytest -q -m "not java and not spark and not kafka and not kafka_cluster"

clean:
	rm -rf $(VENV) build *.egg-info
