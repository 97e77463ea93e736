"""Mutation check: break the production code on purpose and see which unit tests notice.

    .venv/bin/python tests/mutation_check.py            # every mutation below
    .venv/bin/python tests/mutation_check.py produce    # those whose name contains "produce"

Each mutation replaces one exact piece of text in one file of a temporary copy of
the repository, runs the unit tests named with it (in that copy, fast ones: no
broker), and reports CAUGHT (some test failed) or SURVIVED (all passed: a
feature can break unnoticed).  The repository itself is never modified.  A
mutation whose text is no longer found is reported STALE: update it with the
code.  docs/testing.md lists the current survivors.  A mutation of C source (the byte path,
protocol/_native.c) is built into the copy before its tests run, and the original after.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.native import build_native  # noqa: E402
_SESSION_TIME = re.compile(r" in ([0-9.]+)s")


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    #: a second (old, new) replacement in the same file, for behaviour guarded twice
    extra: tuple[str, str] | None = None


MUTATIONS = (
    Mutation("re-authentication: an expired SASL session goes on", "gateway/connection/core.py",
             "                session.expired(time.monotonic())):", "                False):",
             ("tests/unit/gateway/test_connection_core.py",)),
    Mutation("re-authentication: another principal accepted", "gateway/auth/sasl.py",
             "                if self.reauthenticating and principal != self._principal:",
             "                if False:",
             ("tests/unit/gateway/test_sasl.py",)),
    Mutation("upstream re-authentication: kgw's session left to expire", "gateway/connection/upstream_side.py",
             "        if time.monotonic() >= self.reauth_at:", "        if False:",
             ("tests/unit/gateway/test_upstream_reauth.py",)),
    Mutation("upstream re-authentication: started with requests in flight", "gateway/connection/upstream_side.py",
             "        if self.last_sent is not None and self.last_sent in conn.in_flight:", "        if False:",
             ("tests/unit/gateway/test_upstream_reauth.py",)),
    Mutation("proxy protocol: a header taken from an untrusted source", "gateway/process/listeners.py",
             "            if not self._trusted_balancer(addr[0]):", "            if False:",
             ("tests/unit/gateway/test_proxy_listener.py",)),
    Mutation("proxy protocol: host ACLs see the balancer, not the client", "gateway/process/listeners.py",
             "        source = reader.result.source or (addr[0], addr[1])", "        source = (addr[0], addr[1])",
             ("tests/unit/gateway/test_proxy_listener.py",)),
    Mutation("audit chain: an edited event not detected", "authz/audit_chain.py",
             "        if seal(event)[1] != claimed:", "        if False:",
             ("tests/unit/authz/test_audit_chain.py",)),
    Mutation("audit chain: a deleted checkpointed tail unnoticed", "authz/audit_chain.py",
             "                if last < checkpoint.seq:", "                if False:",
             ("tests/unit/authz/test_audit_chain.py",)),
    Mutation("client quotas: the least specific level wins", "metadata/client_quotas.py",
             "    for level, template, by_user, by_client in LEVELS:",
             "    for level, template, by_user, by_client in reversed(LEVELS):",
             ("tests/unit/metadata/test_client_quotas.py",)),
    Mutation("client quotas: a throttled connection read on", "gateway/connection/core.py",
             "            if time.monotonic() < self.throttled_until:", "            if False:",
             ("tests/unit/gateway/test_quotas.py",)),
    Mutation("client quotas: a throttled lane's answers not read meanwhile", "gateway/connection/data_plane.py",
             "                elif type(outcome) is NeedThrottle:  # over a quota: held here, the answers still read",
             "                elif False:",
             ("tests/unit/gateway/test_quotas.py",)),
    Mutation("client quotas: produce bytes not counted", "gateway/connection/quotas.py",
             "        if api_key == PRODUCE and self.produce is not None:", "        if False:",
             ("tests/unit/gateway/test_quotas.py",)),
    Mutation("client quotas: a quota of 0 or less accepted", "protocol/apis/quotas.py",
             "    if not value > 0:", "    if False:",
             ("tests/unit/protocol/test_quota_api.py",)),
    Mutation("client quotas: described without DESCRIBE_CONFIGS", "protocol/apis/quotas.py",
             "    if not auth.cluster(AclOperation.DESCRIBE_CONFIGS):", "    if False:",
             ("tests/unit/protocol/test_quota_api.py",)),
    Mutation("audit report: events beyond the scraped head reconciled", "kgw_spark/trail.py",
             "        kinds = Counter(k for s, k in self.by_seq.items() if s <= head)",
             "        kinds = Counter(self.by_seq.values())",
             ("tests/unit/kgw_spark/test_trail.py",)),
    Mutation("audit report: a tampered chain reported intact", "kgw_spark/trail.py",
             '    return {"ok": report.ok, "records": count,', '    return {"ok": True, "records": count,',
             ("tests/unit/kgw_spark/test_trail.py",)),
    Mutation("audit chain: a refused batch left off the record", "gateway/process/audit_publisher.py",
             "                            self._unrecorded += len(batch) + sealed[2][1]", "                            pass",
             ("tests/unit/gateway/test_audit_publisher.py",)),
    Mutation("sni: a name for an unknown broker routed", "gateway/auth/tls.py",
             "        if found is None or not self._known(int(found.group(1))):", "        if found is None:",
             ("tests/unit/gateway/test_sni_routing.py",)),
    Mutation("oauthbearer: the token's audience not checked", "gateway/auth/oauthbearer.py",
             "        if self.expected_audience:\n", "        if False:\n",
             ("tests/unit/gateway/test_oauthbearer.py",)),
    Mutation("oauthbearer: a rotated key never fetched", "gateway/auth/oauthbearer.py",
             "            if not self.keys.refetch_for_unknown_kid() or self.keys.keys is None:",
             "            if True:",
             ("tests/unit/gateway/test_oauthbearer.py",)),
    Mutation("group principals: ACLs on a token's groups not matched", "authz/acl_rules.py",
             "        if groups:\n            keys = (*keys,", "        if False:\n            keys = (*keys,",
             ("tests/unit/authz/test_standard_authorizer.py",)),
    Mutation("change trail: a config change kgw made not recorded", "protocol/apis/configs.py",
             '                auth.record_change("ALTER_CONFIGS", _audit_resource(rtype, r.resource_name), f"set {outcome.applied}")',
             "                pass",
             ("tests/unit/protocol/test_configs_api.py",)),
    Mutation("change trail: a forwarded change recorded though the upstream refused it", "protocol/apis/configs.py",
             "            if int(entry.error_code) == 0 and key in asked:", "            if key in asked:",
             ("tests/unit/protocol/test_configs_api.py",)),
    Mutation("metadata log: no fsync of appended batches", "metadata/directory_files.py",
             "    write_all(files, fd, data)\n    files.fsync(fd)", "    write_all(files, fd, data)",
             ("tests/unit/metadata/test_power_loss.py",)),
    # A rolled segment's directory entry is made durable twice: by the roll's own directory
    # fsync and by the acknowledged-offset file written (renamed, directory fsynced) right after
    # it.  Removing either alone loses nothing; removing both must be seen.
    Mutation("metadata log: a rolled segment's directory entry never made durable", "metadata/directory.py",
             "            files.fsync_dir(self._path)\n        except BaseException:",
             "            pass\n        except BaseException:",
             ("tests/unit/metadata/test_power_loss.py",),
             extra=("        self._segments.append(segment)\n        self._record_acknowledged()",
                    "        self._segments.append(segment)\n        self._acknowledged_at = time.monotonic() + 3600")),
    Mutation("metadata image: SCRAM records not kept", "metadata/image.py",
             "            self.scram[(record.name, record.mechanism)] = record", "            pass",
             ("tests/unit/protocol/test_scram_api.py",)),
    Mutation("produce: the whole request forwarded when any topic is allowed", "protocol/apis/produce.py",
             "    if len(allowed) == len(counts) and not shape.any_invalid and not unknown_ids:", "    if allowed:",
             ("tests/unit/protocol/test_produce_enforcement.py",)),
    Mutation("produce: transactional batches not checked", "protocol/apis/produce.py",
             "    if shape.transactional and (", "    if False and (",
             ("tests/unit/protocol/test_produce_enforcement.py",)),
    Mutation("produce: batches not validated", "protocol/apis/produce.py",
             "    size = end - start\n", "    return None\n",
             ("tests/unit/protocol/test_produce_enforcement.py",)),
    Mutation("produce: a records length in two varint bytes misread", "protocol/apis/produce.py",
             "((frame[off] & 0x7F) | (frame[off + 1] << 7)) - 1, 2",
             "((frame[off] & 0x7F) | (frame[off + 1] << 8)) - 1, 2",
             ("tests/unit/protocol/test_produce_walk.py",)),
    Mutation("request context: kept with the principal the connection had before", "gateway/connection/core.py",
             "        if base is None or base.principal is not self.principal:", "        if base is None:",
             ("tests/unit/gateway/test_connection_core.py",)),
    Mutation("request context: a copy keeps the first request's correlation id", "authz/authorizer.py",
             "        _put_correlation_id(context, correlation_id)", "        _put_correlation_id(context, self.correlation_id)",
             ("tests/unit/gateway/test_connection_core.py",)),
    Mutation("find coordinator: address not rewritten", "protocol/apis/find_coordinator.py",
             'inspect_decoded, rewrite_response=_rewrite_find_coordinator,',
             'inspect_decoded, rewrite_response=None,',
             ("tests/unit/protocol/test_address_rewriting.py",)),
    Mutation("describe cluster: brokers not rewritten", "protocol/apis/cluster.py",
             '    return encode(replace(response, brokers=rewrite_node_list(response.brokers, nodes, "broker_id")))',
             "    return encode(response)",
             ("tests/unit/protocol/test_address_rewriting.py",)),
    Mutation("metadata: topic ids forwarded with the names", "protocol/apis/metadata.py",
             "request, topics=tuple(make(id_topic, topic_id=i, name=None) for i in wanted_ids),\n"
             "                allow_auto_topic_creation=False))",
             "request, topics=request.topics))",
             ("tests/unit/protocol/test_topics_enforcement.py",)),
    Mutation("bounds: counts not checked before kio", "protocol/codecs.py",
             "        check_lengths(cls, buf, offset)\n", "        pass\n",
             ("tests/unit/protocol/test_framing.py",)),
    Mutation("framing: a client's frame allocated from its announced length", "protocol/framing.py",
             "        if size is not None and self.trusted and size <= TRUSTED_PREALLOCATION:",
             "        if size is not None and size <= TRUSTED_PREALLOCATION:",
             ("tests/unit/protocol/test_framing.py",)),
    Mutation("framing: an upstream frame assembled by copying instead of received in place", "protocol/framing.py",
             "        if size is not None and self.trusted and size <= TRUSTED_PREALLOCATION:",
             "        if False:",
             ("tests/unit/protocol/test_framing.py",)),
    Mutation("registry: versions outside the spec advertised", "protocol/apis/api_versions.py",
             "        lo, hi = max(kio_range.min, spec.versions[0]), min(kio_range.max, spec.versions[1])",
             "        lo, hi = kio_range.min, kio_range.max",
             ("tests/unit/protocol/test_registry_coverage.py",)),
    Mutation("configs: a change that locks its caller out accepted", "gateway/process/dynamic_config.py",
             "                    self._refuse_self_lockout(after, context)\n", "                    pass\n",
             ("tests/unit/protocol/test_configs_api.py",)),
    Mutation("authorizer: audit of one request unbounded", "authz/standard_authorizer.py",
             "                if logged >= MAX_AUDITED_ACTIONS_PER_CALL:", "                if False:",
             ("tests/unit/authz/test_standard_authorizer.py",)),
    Mutation("connection: a closed connection kept alive by its lane (cycle)", "gateway/connection/handoff.py",
             "        conn.lane = None\n", "        pass\n",
             ("tests/unit/gateway/test_connection.py",)),
    Mutation("connection: large requests inspected on the shared loop", "gateway/connection/core.py",
             "        size = len(frame)\n        if size <= self._offload_request:",
             "        size = len(frame)\n        return False\n        if size <= self._offload_request:",
             ("tests/unit/gateway/test_connection.py",)),
    Mutation("regex subscription: the expression forwarded for the broker to resolve", "protocol/apis/consumer_groups.py",
             "    return _regex_subscription(auth, v, request)", "    return FORWARD",
             ("tests/unit/protocol/test_regex_subscriptions.py",)),
    Mutation("share fetch: only the partitions named in the request authorized", "protocol/apis/share_groups.py",
             "        if key == 78 and epoch > 0:\n            return _share_session(",
             "        if False:\n            return _share_session(",
             ("tests/unit/protocol/test_share_sessions.py",)),
    Mutation("share fetch: a session another connection opened used", "protocol/apis/share_groups.py",
             "        if key == 78 and epoch > 0 and session_key not in sessions:", "        if False:",
             ("tests/unit/protocol/test_share_sessions.py",)),
    Mutation("delegation tokens: the owner left for the broker to choose", "protocol/apis/admin.py",
             "forwarded = dataclasses.replace(request, owner_principal_type=owner[0], owner_principal_name=owner[1],",
             "forwarded = dataclasses.replace(request,",
             ("tests/unit/protocol/test_admin_enforcement.py",)),
    Mutation("delegation tokens: renewed or expired by anyone", "protocol/apis/admin.py",
             "            if me == (token.principal_type, token.principal_name) or me in renewers:",
             "            if True:",
             ("tests/unit/protocol/test_admin_enforcement.py",)),
    Mutation("streams: internal topics created without CREATE", "protocol/apis/streams_groups.py",
             "        if not unauthorized:\n            return FORWARD", "        if True:\n            return FORWARD",
             ("tests/unit/protocol/test_streams_internal_topics.py",)),
    Mutation("describe topic partitions: all topics paged by the broker with kgw's authority", "protocol/apis/topics.py",
             "        return Decision(then=then)\n\n    cursor = request.cursor",
             "        return FORWARD\n\n    cursor = request.cursor",
             ("tests/unit/protocol/test_topics_enforcement.py",)),
    Mutation("connection: a client that never reads keeps being read (Trio)", "gateway/connection/core.py",
             "        return self.unsent >= self.max_unsent", "        return False",
             ("tests/unit/gateway/test_connection_bounds.py",)),
    Mutation("data plane: a client that never reads keeps being read", "gateway/connection/data_plane.py",
             "            while len(pending) < limit and conn.unsent < conn.max_unsent:",
             "            while len(pending) < limit:",
             ("tests/unit/gateway/test_connection_bounds.py",)),
    Mutation("data plane: no quantum per lane and turn", "gateway/connection/data_plane.py",
             "                budget -= 1\n", "                pass\n",
             ("tests/unit/gateway/test_connection_bounds.py",)),
    Mutation("splicing: a Fetch record set read through kgw's memory instead", "protocol/apis/fetch.py",
             "        if rest < self.splice_min:\n            return False", "        if True:\n            return False",
             ("tests/unit/gateway/test_splicing.py",)),
    Mutation("splicing: a client that reads nothing keeps its pipe and connection", "gateway/connection/data_plane.py",
             "                elif now >= sp.client_at + lane.conn.idle_s:", "                elif False:",
             ("tests/unit/gateway/test_splicing.py",)),
    Mutation("splicing: node_endpoints keep the brokers' addresses", "protocol/apis/fetch.py",
             "            if r.tags_at >= 0 and r.version >= 16:", "            if False:",
             ("tests/unit/protocol/test_fetch_stream.py",)),
    Mutation("denied answers: kio's type hints read again for every answer", "protocol/codecs.py",
             "@lru_cache(maxsize=None)  # (typing.get_type_hints", "# (typing.get_type_hints",
             ("tests/unit/gateway/test_denied_answer_cost.py",)),
    Mutation("logins: no per-host turn for password hashing", "gateway/auth/password_hashing.py",
             "            async with turn.slots:", "            async with trio.Semaphore(1 << 20):",
             ("tests/unit/gateway/test_password_hashing.py",)),
    Mutation("logins: a verified password hashed again", "authz/credentials.py",
             "        if self.known(credential, password):\n            return True\n", "",
             ("tests/unit/gateway/test_password_hashing.py",)),
    Mutation("api versions: an invalid KIP-511 client software name accepted", "gateway/connection/core.py",
             "        if invalid is not None:\n            return invalid\n", "",
             ("tests/unit/gateway/test_connection.py",)),
    Mutation("scenarios: JoinGroup authorized with DESCRIBE instead of READ", "protocol/apis/classic_groups.py",
             '    """JoinGroup (docs/authorization.md): GROUP:READ, W 30 (JoinGroupRequest.getErrorResponse)."""\n'
             "    if not auth.enabled or auth.allowed(GROUP, info.decoded.group_id, READ):",
             '    """JoinGroup (docs/authorization.md): GROUP:READ, W 30 (JoinGroupRequest.getErrorResponse)."""\n'
             "    if not auth.enabled or auth.allowed(GROUP, info.decoded.group_id, DESCRIBE):",
             ("tests/unit/protocol/test_scenarios.py",)),
    Mutation("fast path: versions above the advertised maximum forwarded", "gateway/connection/core.py",
             "        if allowed is None or not allowed.min <= api_version <= allowed.max:",
             "        if allowed is None or api_version < allowed.min:",
             ("tests/unit/gateway/test_connection.py::"
              "test_a_version_outside_the_advertised_range_never_reaches_the_broker_on_a_forwarding_connection",)),
    Mutation("metadata log: the segment-gap check removed", "metadata/directory_files.py",
             "            if batch.base_offset > expected:\n                raise MetadataLogCorruptError(",
             "            if False:\n                raise MetadataLogCorruptError(",
             ("tests/unit/metadata/test_metadata_repair.py::test_a_deleted_sealed_segment_sets_the_later_ones_aside",)),
    Mutation("connections: the authentication deadline replaced by the idle deadline", "gateway/connection/core.py",
             "            if now >= self._auth_deadline:", "            if now >= self.last_read + self._idle_s:",
             ("tests/unit/gateway/test_connection_deadlines.py",)),
    Mutation("listeners: max.connections not enforced", "gateway/process/listeners.py",
             "        if self._connections >= self.max_connections:", "        if False:",
             ("tests/unit/gateway/test_connection_limits.py::test_a_listeners_max_connections_is_enforced",)),
    Mutation("metadata log: damage followed by valid batches cut as a torn tail", "metadata/directory_files.py",
             "    if is_last and later is None and scan.next_offset >= acknowledged_next:", "    if is_last:",
             ("tests/unit/metadata/test_metadata_log.py::test_damage_in_the_middle_of_the_active_segment_refuses_to_start",)),
    Mutation("metadata log: a bad last batch below the acknowledged offset cut as a torn tail",
             "metadata/directory_files.py",
             "    if is_last and later is None and scan.next_offset >= acknowledged_next:",
             "    if is_last and later is None:",
             ("tests/unit/metadata/test_metadata_log.py::test_damage_to_the_last_acknowledged_batch_refuses_to_start",)),
    Mutation("metadata log: a log ending before the acknowledged offset accepted", "metadata/directory_files.py",
             "    _check_acknowledged(path, acknowledged, segments, next_offset)\n", "",
             ("tests/unit/metadata/test_metadata_log.py::test_a_deleted_active_segment_refuses_to_start",)),
    Mutation("metadata log: the acknowledged offset not recorded after group commits", "metadata/directory.py",
             "            if time.monotonic() - self._acknowledged_at >= 1.0:\n"
             "                write_acknowledged(self._files, self._path, next_offset,",
             "            if False:\n                write_acknowledged(self._files, self._path, next_offset,",
             ("tests/unit/metadata/test_metadata_log.py::"
              "test_evidence_of_acknowledged_records_is_kept_at_most_a_second_behind",)),
    Mutation("metadata log: damage a newer snapshot covers stops the start", "metadata/directory_files.py",
             "    index = segments.index(damage.segment)\n", "    return True\n",
             ("tests/unit/metadata/test_metadata_log.py::"
              "test_corruption_in_a_sealed_segment_a_snapshot_covers_is_reported_not_fatal",)),
    Mutation("metadata image: a failed snapshot fails the change before it", "metadata/image.py",
             "        except (OSError, MetadataLogError) as exc:\n            self.snapshot_failures += 1",
             "        except ZeroDivisionError as exc:\n            self.snapshot_failures += 1",
             ("tests/unit/metadata/test_disk_faults.py::test_a_snapshot_without_room_never_fails_the_change_before_it",)),
    Mutation("metadata log: a failed snapshot's .part left on the disk", "metadata/directory_files.py",
             "    except BaseException:\n        files.unlink(part)\n        raise",
             "    except BaseException:\n        raise",
             ("tests/unit/metadata/test_disk_faults.py::test_a_snapshot_without_room_never_fails_the_change_before_it",)),
    Mutation("metadata log: a failed append's bytes left in the segment", "metadata/directory.py",
             "            self._files.ftruncate(self._segment_fd, self._segments[-1].size)\n",
             "            pass\n",
             ("tests/unit/metadata/test_disk_faults.py::"
              "test_a_full_disk_at_the_evidence_file_fails_the_append_and_resumes_exactly",)),
    Mutation("metadata log: writes resumed with no room for them", "metadata/directory.py",
             "        probe_room(files, self._path)\n", "",
             ("tests/unit/metadata/test_disk_faults.py::"
              "test_a_full_disk_fails_the_append_it_hits_and_writes_resume_when_room_returns",)),
    Mutation("readiness: a metadata store taking no writes reported ready", "gateway/process/server.py",
             "            if broken is not None:\n", "            if False:\n",
             ("tests/unit/gateway/test_metadata_store_health.py",)),
    Mutation("readiness: upstream request timeouts not reported", "gateway/process/server.py",
             "        if upstream and self.cluster.timing_out_since is not None:", "        if False:",
             ("tests/unit/gateway/test_upstream_loss.py::"
              "test_upstream_request_timeouts_make_readiness_say_so_once_per_episode",)),
    Mutation("limits: per-host connection overrides ignored", "gateway/process/server.py",
             "        return self.connection_limits_per_host.get(host, self.config.limits.max_connections_per_ip)",
             "        return self.config.limits.max_connections_per_ip",
             ("tests/unit/gateway/test_connection_limits.py::test_a_per_host_override_replaces_the_limit_for_that_host",)),
    Mutation("repair: records after the damage applied instead of set aside", "metadata/repair.py",
             "                if bad > start:\n                    plan.keep_next, plan.truncate = bad, (segment.path, scan.valid_bytes)",
             "                if bad > start:\n                    plan.keep_next, plan.truncate = bad, (segment.path, len(raw))",
             ("tests/unit/metadata/test_metadata_repair.py::test_a_flipped_byte_is_repaired_to_exactly_the_records_before_it",)),
    Mutation("authorizer config: a mistyped key (super.user) accepted", "gateway/process/preflight.py",
             "    if callable(keys):", "    if False:",
             ("tests/unit/gateway/test_check.py",)),
    Mutation("authorizer config: a boolean that is not one read as false", "authz/standard_authorizer.py",
             "    raise ConfigError(f\"{key}: {value!r} is not true or false\")", "    return value",
             ("tests/unit/gateway/test_check.py", "tests/unit/authz/test_standard_authorizer.py")),
    Mutation("kgw acls: repeated flags reduced to the last", "gateway/cli/acls.py",
             "    operations = list(dict.fromkeys(_enum(AclOperation, op, concrete=True) for op in args.operation))",
             "    operations = [_enum(AclOperation, args.operation[-1], concrete=True)]",
             ("tests/unit/gateway/test_acl_cli.py",)),
    Mutation("client reads: the announced rest of a request read (allocated) at once", "gateway/connection/data_plane.py",
             "min(to_come, _RECV_FRAME)", "to_come",
             ("tests/unit/gateway/test_data_plane_reads.py",)),
    Mutation("Produce responses in C: a partition's tagged fields skipped unseen (leader hints missed)",
             "protocol/_native.c",
             "if (!skip_compact_string(c) || !empty_tags(c, 1))  /* the error message; current_leader */",
             "if (!skip_compact_string(c) || !short_uvarint(c, &count))  /* the error message; current_leader */",
             ("tests/unit/protocol/test_hot_path_apis.py",)),
    Mutation("Produce walk in C: a small batch's transactional bit unseen (TRANSACTIONAL_ID unchecked)",
             "protocol/_native.c",
             "if (size >= 23 && (c->p[rec_start + 22] & TRANSACTIONAL))",
             "if (size >= 2300 && (c->p[rec_start + 22] & TRANSACTIONAL))",
             ("tests/unit/protocol/test_native_walk.py",)),
    Mutation("Produce walk in C: a control batch forwarded as valid", "protocol/_native.c",
             "    if (attributes & CONTROL)\n        return 0;\n", "",
             ("tests/unit/protocol/test_native_walk.py",)),
    Mutation("Produce walk in C: bytes after the last topic accepted", "protocol/_native.c",
             "    if (!empty_tags(&c, flexible) || c.off != c.n)", "    if (!empty_tags(&c, flexible))",
             ("tests/unit/protocol/test_native_walk.py",)),
    Mutation("Produce walk in C: topic ids' UUIDs kept without bound", "protocol/_native.c",
             "        if (PyDict_GET_SIZE(Uuids) >= UUIDS_KEPT)", "        if (0)",
             ("tests/unit/protocol/test_native_walk.py",)),
    Mutation("decision memo: a remembered allowance outlives an ACL change", "authz/standard_authorizer.py",
             "if (self._allowed.get(id(action)) is not action or authorizer._data is not self._data\n",
             "if (self._allowed.get(id(action)) is not action\n",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("decision memo: remembered allowances kept from the audit sinks and DEBUG log", "authz/standard_authorizer.py",
             "                or not AuditLevels.allowed_silent_now(authorizer.audit_sinks)):\n            return False",
             "                ):\n            return False",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("decision memo: what it answers not counted", "authz/standard_authorizer.py",
             "            metrics.record(self._listener, 1, 0)\n", "            pass\n",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("decision memo: another principal's allowance remembered", "authz/standard_authorizer.py",
             "context.principal is self._principal\n                and context.host_address == self._host and",
             "True and",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("decision memo: kept without bound", "authz/standard_authorizer.py",
             "or len(self._allowed) >= MEMO_ACTIONS:", ":",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("decision memo: a subclass's own authorize bypassed", "authz/standard_authorizer.py",
             "        if type(self).authorize is not StandardAuthorizer.authorize:  # a subclass decides its own way\n            return None\n",
             "",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("sole action: an invalid batch forwarded on a remembered topic WRITE", "protocol/apis/produce.py",
             "    if shape.transactional or shape.any_invalid or len(topics) != 1:",
             "    if shape.transactional or len(topics) != 1:",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("sole action: a transactional batch forwarded on a remembered topic WRITE", "protocol/apis/produce.py",
             "    if shape.transactional or shape.any_invalid or len(topics) != 1:",
             "    if shape.any_invalid or len(topics) != 1:",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("sole action: a second topic carried by the first's remembered WRITE", "protocol/apis/produce.py",
             "    if shape.transactional or shape.any_invalid or len(topics) != 1:",
             "    if shape.transactional or shape.any_invalid or not topics:",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("sole action: a request forwarded without the memo's word", "gateway/connection/core.py",
             "and (action := sole(header, info)) is not None and memo.allows(action)):",
             "and (action := sole(header, info)) is not None):",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("sole action: another principal's memo asked", "gateway/connection/core.py",
             "if (sole is not None and memo is not None and self._context.principal is self.principal\n",
             "if (sole is not None and memo is not None\n",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("decision memo: the connection keeps its first principal's memo", "gateway/connection/core.py",
             "            self._memo = authorizer.decision_memo(base) if authorizer is not None else None",
             "            self._memo = self._memo or (authorizer.decision_memo(base) if authorizer is not None else None)",
             ("tests/unit/gateway/test_decision_memo.py",)),
    Mutation("header in C: a client id that is not UTF-8 taken", "protocol/_native.c",
             "values[3] = PyUnicode_DecodeUTF8((const char *)p + off, cid_len, \"strict\");",
             "values[3] = PyUnicode_DecodeUTF8((const char *)p + off, cid_len, \"replace\");",
             ("tests/unit/protocol/test_native_header.py",)),
    Mutation("header in C: tagged fields in the header skipped as none", "protocol/_native.c",
             "        if (off >= n || p[off] != 0)\n            goto not_usual;\n        off += 1;",
             "        if (off >= n)\n            goto not_usual;\n        off += 1;",
             ("tests/unit/protocol/test_native_header.py",)),
    Mutation("header in C: a client id longer than the frame read", "protocol/_native.c",
             "    } else if (cid_len < 0 || cid_len > n - off) {", "    } else if (cid_len < 0) {",
             ("tests/unit/protocol/test_native_header.py",)),
    Mutation("C part: another class's slots taken as the bound class's", "protocol/_native.c",
             "if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) || PyDescr_TYPE(d) != type",
             "if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)",
             ("tests/unit/protocol/test_native_header.py",)),
    Mutation("authorizer metrics: denials left out of the counts", "authz/metrics.py",
             "                tally[1] += denied\n", "                pass\n",
             ("tests/unit/authz/test_authorizer_metrics.py",)),
    Mutation("authorizer metrics: one window for ever", "authz/metrics.py",
             "            if now - last[0] >= SAMPLE_WINDOW_S:\n                last = window.begin(now)",
             "            if not window.samples:\n                last = window.begin(now)",
             ("tests/unit/authz/test_authorizer_metrics.py",)),
    Mutation("frame cursor in C: a length over the limit taken", "protocol/_native.c",
             "    if (size < 0 || size > self->limit) {", "    if (size < 0) {",
             ("tests/unit/protocol/test_framing.py",)),
    Mutation("frame cursor in C: a split length prefix dropped on the next read", "protocol/_native.c",
             "    if (view->len - self->pos > 0) {  /* a partial length prefix", "    if (0) {  /* a partial length prefix",
             ("tests/unit/protocol/test_framing.py",)),
    Mutation("frame cursor in C: a frame running past the chunk returned short", "protocol/_native.c",
             "    if (end <= len) {\n        PyObject *frame = PySequence_GetSlice(self->chunk, pos, end);",
             "    if (1) {\n        PyObject *frame = PySequence_GetSlice(self->chunk, pos, end);",
             ("tests/unit/protocol/test_framing.py",)),
    Mutation("frame cursor in C: a held-back frame not made whole before more is read", "protocol/_native.c",
             "    if (self->deferred) {\n        PyObject *done = PyObject_CallMethodNoArgs((PyObject *)self, S_materialize);",
             "    if (0) {\n        PyObject *done = PyObject_CallMethodNoArgs((PyObject *)self, S_materialize);",
             ("tests/unit/protocol/test_framing.py",)),
    Mutation("audit: allowed decisions kept from the sinks at the default log level", "authz/audit.py",
             "        return not sinks and not audit_logger.isEnabledFor(logging.DEBUG)",
             "        return not audit_logger.isEnabledFor(logging.DEBUG)",
             ("tests/unit/authz/test_standard_authorizer.py",)),
)


def run(mutation: Mutation, copy: Path) -> str:
    target = copy / mutation.path
    original = target.read_text()
    if original.count(mutation.old) != 1:
        return "STALE"
    mutated = original.replace(mutation.old, mutation.new)
    if mutation.extra is not None:
        if mutated.count(mutation.extra[0]) != 1:
            return "STALE"
        mutated = mutated.replace(*mutation.extra)
    target.write_text(mutated)
    try:
        if mutation.path.endswith(".c"):
            build_native(copy)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutation.tests],
                              cwd=copy, capture_output=True, text=True, timeout=600)
    finally:
        target.write_text(original)
        if mutation.path.endswith(".c"):
            build_native(copy)
    took = _SESSION_TIME.findall(done.stdout)  # pytest's own count: collection and tests, not its start-up
    return ("SURVIVED" if done.returncode == 0 else "CAUGHT") + (f" in {took[-1]}s" if took else "")


def main(argv: list[str]) -> int:
    wanted = [m for m in MUTATIONS if not argv or any(a in m.name for a in argv)]
    with tempfile.TemporaryDirectory(prefix="kgw-mutation-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info"))
        survivors = 0
        for mutation in wanted:
            verdict = run(mutation, copy)
            survivors += not verdict.startswith("CAUGHT")
            print(f"{verdict:17} {mutation.name}", flush=True)
    print(f"{len(wanted) - survivors} of {len(wanted)} mutations caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
