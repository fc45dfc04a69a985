"""Klutch's own validation corpus against our catalog on the real Control Plane: every case gets
Klutch's verdict, and every refusal the rules Klutch's XRDs state (no more, no fewer).

The cases are anynines/klutchio's ``test/validations`` files and claim examples of
``crossplane-api/examples``, written here as parameters; each names the file and the commit read.
Klutch's runner (``test/validations/run-create-tests.sh``, ``run-update-tests.sh``) does
``kubectl apply --dry-run=server`` for a create case, and for an update case applies ``base`` for
real, then ``kubectl patch --type=merge --dry-run=server`` per patch; kubectl sends both with
``fieldValidation=Strict``. These tests make the same requests, one dry run per case, in parallel.

The verdict is the one of Klutch's current XRDs (``crossplane-api/api/common/
postgresql_definition.yaml`` at 4266fe59, ``backup_definition.yaml`` at fa2e8f97,
``a9s/messaging/definition.yaml`` at 0f31c83a): some stored update files are older than those
XRDs and name plans the XRDs no longer list (a8s ``-large``, a9s ``-medium``); Klutch's plan rule
refuses those, so they are refusals here ("Unsupported plan used for postgresql"), and
``update-a9s-plan-single-medium.yaml``, whose base such a plan is, is left out. So are the
revisions written for Crossplane v2's ``spec.crossplane.compositionRef`` (for example
``examples/a9s/messaging/backup.yaml`` at 51671bc5): our claim CRDs are Crossplane 1.x's.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from klutch_gitops.catalog import load_xrds
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.resources import NAMESPACES
from tests.kit.wait import eventually

from .catalogstack import catalog_offered

pytestmark = pytest.mark.crossplane

GROUP = "anynines.com"
XRDS = {xrd["spec"]["claimNames"]["kind"]: xrd for xrd in load_xrds()}
VALIDATIONS = "test/validations"
EXAMPLES = "crossplane-api/examples"

SERVICE = "Unsupported service used for postgresql"
PLAN = "Unsupported plan used for postgresql"
SMALLER = "Transition from bigger to smaller plan size is not supported."
TO_SINGLE = "Migration from clustered to single Data Service Instance is not supported."
SSL = "Plan migrations not possible from Non-SSL to SSL and SSL to Non-SSL"
BIONIC = "Plan migrations not possible from Non-Bionic to Bionic and Bionic to Non-Bionic"
IMMUTABLE = "Service is an immutable field"
TYPE = "Selected service instance type is not supported."

Spec = dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One case: a claim to create, or (with ``base``) a merge patch of a live claim."""

    source: str  # path in anynines/klutchio @ the commit read
    kind: str
    spec: Spec
    refused: tuple[str, ...] | None = None  # None: Klutch accepts it; else what Klutch states
    base: Spec | None = None
    ours_accepts: str = ""  # a refusal of Klutch's we differ from: catalog/README.md's bullet


def pg(service: str, plan: str, composition: str, **more: Any) -> Spec:
    return {"service": service, "plan": plan, "compositionRef": {"name": composition}, **more}


def a9s(service: str, plan: str, composition: str, **parameters: Any) -> Spec:
    spec: Spec = {"service": service, "plan": plan, "compositionRef": {"name": composition}}
    return {**spec, "parameters": parameters} if parameters else spec


def a9s_claim(service: str, composition: str) -> Spec:
    """A binding, backup or restore claim of Klutch's a9s examples, for its example instance."""
    ref = "backupRef" if composition == "a9s-restore" else "instanceRef"
    return {
        ref: f"example-a9s-{service}",
        "serviceInstanceType": service,
        "compositionRef": {"name": composition},
    }


def backup(kind: str, composition: str) -> Spec:
    return {
        "instanceRef": "sample-instance",
        "serviceInstanceType": kind,
        "compositionRef": {"name": composition},
    }


def plans(
    source: str, base: Spec, valid: list[str], invalid: list[tuple[str, tuple[str, ...]]]
) -> list[Case]:
    """An update file: patches of ``spec.plan``, those Klutch accepts and those it refuses."""
    accepted = [Case(source, "PostgresqlInstance", {"plan": p}, None, base) for p in valid]
    refused = [Case(source, "PostgresqlInstance", {"plan": p}, r, base) for p, r in invalid]
    return accepted + refused


A8S_PARAMETERS = {  # test/validations/postgresql/create-valid-a8s.yaml, its last document
    "maxConnections": 120,
    "tempFileLimit": 1024,
    "trackIoTiming": "on",
    "archiveTimeout": 1000,
    "statementTimeout": 3000,
    "walWriterDelay": 400,
    "maxReplicationSlots": 12,
    "maxWalSenders": 12,
    "synchronousCommit": "local",
    "sslCiphers": "NULL-MD5",
    "sslMinProtocolVersion": "TLSv1",
    "clientMinMessages": "LOG",
    "logMinMessages": "NOTICE",
    "logMinErrorStatement": "WARNING",
    "logStatement": "ddl",
    "logErrorVerbosity": "TERSE",
    "maxLocksPerTransaction": 128,
}
A8S_DEFAULTS = {  # crossplane-api/examples/a8s/postgresql-claim-defaults.yaml
    "maxConnections": 100,
    "tempFileLimit": -1,
    "trackIoTiming": "off",
    "archiveTimeout": 0,
    "statementTimeout": 0,
    "walWriterDelay": 200,
    "maxReplicationSlots": 10,
    "maxWalSenders": 10,
    "synchronousCommit": "on",
    "sslCiphers": "HIGH:MEDIUM:+3DES:!aNULL",
    "sslMinProtocolVersion": "TLSv1.2",
    "clientMinMessages": "NOTICE",
    "logMinMessages": "WARNING",
    "logMinErrorStatement": "ERROR",
    "logStatement": "none",
    "logErrorVerbosity": "DEFAULT",
}
A9S_PARAMETERS = {  # test/validations/postgresql/create-valid-a9s.yaml, its last document
    "tempFileLimit": 4096,
    "trackIoTiming": "on",
    "archiveTimeout": 10,
    "statementTimeout": 3000,
    "walWriterDelay": 400,
    "maxReplicationSlots": 12,
    "synchronousCommit": "local",
    "clientMinMessages": "LOG",
    "logMinMessages": "NOTICE",
    "logMinErrorStatement": "WARNING",
    "logStatement": "ddl",
    "logErrorVerbosity": "VERBOSE",
}
TYPES = ("keyvalue", "postgresql", "mongodb", "search", "logme2", "prometheus", "messaging")

CREATES = [
    # test/validations/backup: a8s backs up PostgreSQL only; a9s every type.
    *(
        Case(f"{VALIDATIONS}/backup/create-invalid-a8s-{kind}.yaml@{commit}", "Backup",
             backup(kind, "a8s-backup"), (TYPE,))
        for kind, commit in (
            ("keyvalue", "ab8cf0b6"), ("logme2", "3bb6ce43"), ("mariadb", "8c16f857"),
            ("messaging", "3bb6ce43"), ("mongodb", "8c16f857"), ("prometheus", "8c16f857"),
            ("search", "8c16f857"),
        )
    ),
    Case(f"{VALIDATIONS}/backup/create-invalid-a8s-missing-instance-ref.yaml@8c16f857", "Backup",
         {"serviceInstanceType": "postgresql", "compositionRef": {"name": "a8s-backup"}},
         ("spec.instanceRef: Required value",)),
    Case(f"{VALIDATIONS}/backup/create-invalid-a8s-missing-service-instance-type.yaml@8c16f857",
         "Backup", {"instanceRef": "sample-instance", "compositionRef": {"name": "a8s-backup"}},
         ("spec.serviceInstanceType: Required value",)),
    Case(f"{VALIDATIONS}/backup/create-valid-a8s.yaml@8c16f857", "Backup",
         backup("postgresql", "a8s-backup")),
    *(
        Case(f"{VALIDATIONS}/backup/create-valid-a9s.yaml@647a2649", "Backup",
             backup(kind, "a9s-backup"))
        for kind in (*TYPES, "mariadb")
    ),
    # test/validations/postgresql
    *(
        Case(f"{VALIDATIONS}/postgresql/create-valid-a8s.yaml@77f4b42d", "PostgresqlInstance",
             pg(service, plan, "a8s-postgresql", **more))
        for service, plan, more in (
            ("a9s-postgresql13", "postgresql-single-nano", {}),
            ("a9s-postgresql14", "postgresql-single-nano", {}),
            ("a9s-postgresql13", "postgresql-single-small", {}),
            ("a9s-postgresql13", "postgresql-single-medium", {}),
            ("a9s-postgresql13", "postgresql-single-big", {}),
            ("a9s-postgresql13", "postgresql-replica-small", {}),
            ("a9s-postgresql13", "postgresql-replica-medium", {}),
            ("a9s-postgresql13", "postgresql-replica-big", {}),
            ("a9s-postgresql13", "postgresql-replica-big", {"parameters": {"maxConnections": 250}}),
            ("a9s-postgresql13", "postgresql-replica-big", {"parameters": A8S_PARAMETERS}),
        )
    ),
    *(
        Case(f"{VALIDATIONS}/postgresql/create-valid-a9s.yaml@3bb6ce43", "PostgresqlInstance",
             pg(service, plan, "a9s-postgresql", **more))
        for service, plan, more in (
            ("a9s-postgresql13", "postgresql-single-nano", {}),
            ("a9s-postgresql15", "postgresql-single-nano", {}),
            ("a9s-postgresql13", "postgresql-single-nano-ssl", {}),
            ("a9s-postgresql13", "postgresql-single-nano-ssl", {"parameters": A9S_PARAMETERS}),
        )
    ),
    Case(f"{VALIDATIONS}/postgresql/create-invalid-a8s-with-unsupported-parameter.yaml@3bb6ce43",
         "PostgresqlInstance",
         pg("a9s-postgresql14", "postgresql-single-nano", "a8s-postgresql",
            parameters={"dataChecksums": "enabled"}),
         ("parameters.dataChecksums is not supported for a8s-postgresql",)),
    Case(f"{VALIDATIONS}/postgresql/create-invalid-a8s-with-wrong-plan-bionic.yaml@8c16f857",
         "PostgresqlInstance",
         pg("a9s-postgresql14", "postgresql-single-nano-bionic", "a8s-postgresql"), (PLAN,)),
    Case(f"{VALIDATIONS}/postgresql/create-invalid-a8s-with-wrong-plan-ssl.yaml@3bb6ce43",
         "PostgresqlInstance",
         pg("a9s-postgresql14", "postgresql-single-nano-ssl", "a8s-postgresql"), (PLAN,)),
    Case(f"{VALIDATIONS}/postgresql/create-invalid-a8s-with-wrong-service.yaml@3bb6ce43",
         "PostgresqlInstance",
         pg("a9s-postgresql15", "postgresql-single-nano", "a8s-postgresql"), (SERVICE,)),
    Case(f"{VALIDATIONS}/postgresql/create-invalid-a9s-with-wrong-plan.yaml@8c16f857",
         "PostgresqlInstance",
         pg("a9s-postgresql15", "postgresql-single-large", "a9s-postgresql"), (PLAN,)),
    Case(f"{VALIDATIONS}/postgresql/create-invalid-a9s-with-wrong-service.yaml@8c16f857",
         "PostgresqlInstance",
         pg("a9s-postgresql14", "postgresql-single-nano", "a9s-postgresql"), (SERVICE,)),
    # crossplane-api/examples: the claims a Klutch user copies.
    Case(f"{EXAMPLES}/a8s/postgresql-claim.yaml@3bb6ce43", "PostgresqlInstance",
         pg("a9s-postgresql13", "postgresql-single-small", "a8s-postgresql", expose="Internal")),
    Case(f"{EXAMPLES}/a8s/postgresql-claim-defaults.yaml@8c16f857", "PostgresqlInstance",
         pg("a9s-postgresql13", "postgresql-single-small", "a8s-postgresql", expose="Internal",
            parameters=A8S_DEFAULTS)),
    Case(f"{EXAMPLES}/a8s/postgresql-claim-parameters.yaml@8c16f857", "PostgresqlInstance",
         pg("a9s-postgresql13", "postgresql-single-small", "a8s-postgresql", expose="Internal",
            parameters=A8S_PARAMETERS)),
    # Klutch's KeyValue example sets clustered-only parameters on a single plan: Klutch's own
    # rules (a9s/keyvalue/definition.yaml at 9770f149) refuse it, with six causes.
    Case(f"{EXAMPLES}/a9s/keyvalue/serviceinstance-claim.yaml@ab8cf0b6", "KeyvalueInstance",
         a9s("a9s-keyvalue8", "keyvalue-single-small-ssl", "a9s-keyvalue")),
    Case(f"{EXAMPLES}/a9s/keyvalue/serviceinstance-claim-parameters.yaml@9ee457b6",
         "KeyvalueInstance",
         a9s("a9s-keyvalue8", "keyvalue-single-small-ssl", "a9s-keyvalue",
             snapshot="['save 900 1','save 300 10','save 60 10000']", replBacklogSize="10mb",
             minReplicasToWrite=2, minReplicasMaxLag=1001, lazyfreeLazyEviction="no",
             lazyfreeLazyExpire="yes", maxmemory="dynamic", maxmemoryPolicy="allkeys-lfu",
             maxmemorySamples=5, maxclients=1001, downAfterMilliseconds=30000,
             failoverTimeout=1500, hostnameResolution="resolve-only",
             tlsProtocols="TLSv1.2 TLSv1.3",
             tlsCiphers="ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
             tlsCiphersuites="TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384",
             luaTimeLimit=5000, notifyKeyspaceEvents="KEA"),
         tuple(f"parameters.{name} is only supported for clustered plans" for name in (
             "hostnameResolution", "downAfterMilliseconds", "failoverTimeout",
             "minReplicasMaxLag", "minReplicasToWrite", "replBacklogSize"))),
    Case(f"{EXAMPLES}/a9s/logme2/serviceinstance-claim.yaml@3bb6ce43", "Logme2Instance",
         a9s("a9s-logme2", "logme-single-small-ssl", "a9s-logme2")),
    Case(f"{EXAMPLES}/a9s/logme2/serviceinstance-claim-parameters.yaml@7ddb1d85",
         "Logme2Instance",
         a9s("a9s-logme2", "logme-single-small-ssl", "a9s-logme2",
             javaHeapspace=512, javaMaxmetaspace=256, javaGarbageCollector="UseParallelGC",
             ismJobInterval=60, ismDeletionAfter="1h", ismJitter=0.5,
             opensearchTlsProtocols=["TLSv1.2", "TLSv1.3"],
             opensearchTlsCiphers=["TLS_DHE_RSA_WITH_AES_256_CBC_SHA"],
             fluentdUdp=60001, fluentdTcp=60002, fluentdTls=60003,
             fluentdTlsCiphers="ALL:!aNULL:!eNULL:!SSLv2", fluentdTlsVersion="TLS1_3",
             fluentdTlsMinVersion="TLS1_2", fluentdTlsMaxVersion="TLS1_3",
             groks=[{"pattern": "%{WORD:Some} %{WORD:Grok} %{WORD:Pattern}"},
                    {"pattern": "%{WORD:Some2} %{WORD:Grok2} %{WORD:Pattern2}"}])),
    Case(f"{EXAMPLES}/a9s/mariadb/serviceinstance-claim.yaml@3bb6ce43", "MariadbInstance",
         a9s("a9s-mariadb106", "mariadb-single-nano-ssl", "a9s-mariadb")),
    Case(f"{EXAMPLES}/a9s/mariadb/serviceinstance-claim-parameters.yaml@d8133cb5",
         "MariadbInstance",
         a9s("a9s-mariadb106", "mariadb-single-nano-ssl", "a9s-mariadb", binlogExpireDays=1,
             databases=["db1", "db2"], grantPerformanceSchemaPermissions=True)),
    Case(f"{EXAMPLES}/a9s/mongodb/serviceinstance-claim.yaml@3bb6ce43", "MongodbInstance",
         a9s("a9s-mongodb50", "mongodbsspl-single-nano-ssl", "a9s-mongodb")),
    Case(f"{EXAMPLES}/a9s/mongodb/serviceinstance-claim-parameters.yaml@fd0376d1",
         "MongodbInstance",
         a9s("a9s-mongodb70", "mongodbsspl-replica-small-ssl", "a9s-mongodb",
             setClusterParameter={
                 "changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": 100}}})),
    Case(f"{EXAMPLES}/a9s/postgresql/serviceinstance-claim.yaml@8c16f857", "PostgresqlInstance",
         pg("a9s-postgresql15", "postgresql-single-nano", "a9s-postgresql")),
    Case(f"{EXAMPLES}/a9s/postgresql/serviceinstance-claim-parameters.yaml@27dcab8e",
         "PostgresqlInstance",
         pg("a9s-postgresql15", "postgresql-replica-small", "a9s-postgresql",
            parameters={**A9S_PARAMETERS, "maxConnections": 200, "maxWalSenders": 12,
                        "logErrorVerbosity": "VERBOSE", "walLevelLogical": True})),
    Case(f"{EXAMPLES}/a9s/prometheus/serviceinstance-claim.yaml@8c16f857", "PrometheusInstance",
         a9s("a9s-prometheus", "prometheus-single-small", "a9s-prometheus")),
    Case(f"{EXAMPLES}/a9s/prometheus/serviceinstance-claim-parameters.yaml@250caba5",
         "PrometheusInstance",
         a9s("a9s-prometheus", "prometheus-single-small", "a9s-prometheus",
             mappingStrictMatch=False,
             scrapeConfigs=[{
                 "job_name": "example_metrics", "scrape_interval": "60s",
                 "scrape_timeout": "30s",
                 "static_configs": [{"targets": [
                     "example-app-prometheus-hungry-hippopotamus-ow.apps.example.a9s-dummy.de"]}],
             }])),
    Case(f"{EXAMPLES}/a9s/search/serviceinstance-claim.yaml@8c16f857", "SearchInstance",
         a9s("a9s-search2", "search-single-small-ssl", "a9s-search")),
    Case(f"{EXAMPLES}/a9s/search/serviceinstance-claim-parameters.yaml@dde41836",
         "SearchInstance",
         a9s("a9s-search2", "search-single-small-ssl", "a9s-search", javaHeapspace=512,
             javaMaxmetaspace=256, javaGarbageCollector="UseParallelGC",
             tlsProtocols=["TLSv1.2", "TLSv1.3"],
             tlsCiphers=["TLS_DHE_RSA_WITH_AES_256_CBC_SHA"])),
    Case(f"{EXAMPLES}/a9s/messaging/serviceinstance-claim.yaml@8c16f857", "MessagingInstance",
         {"service": "a9s-messaging310", "plan": "messaging-single-small-ssl",
          "compositionRef": {"name": "a9s-messaging"}}),
    Case(f"{EXAMPLES}/a9s/messaging/serviceinstance-claim-parameters.yaml@0f31c83a",
         "MessagingInstance",
         {"service": "a9s-messaging313", "plan": "messaging-single-small-ssl",
          "compositionRef": {"name": "a9s-messaging"},
          "parameters": {"consumerTimeout": 1800001, "tlsProtocols": ["tlsv1.2", "tlsv1.3"],
                         "tlsCiphers": ["TLS_DHE_RSA_WITH_AES_256_CBC_SHA"],
                         "roles": ["administrator", "management"]}}),
    Case(f"{EXAMPLES}/a8s/backup-claim.yaml@8c16f857", "Backup",
         {"instanceRef": "example-a8s-postgresql", "serviceInstanceType": "postgresql",
          "compositionRef": {"name": "a8s-backup"}}),
    Case(f"{EXAMPLES}/a8s/restore-claim.yaml@8c16f857", "Restore",
         {"backupRef": "example-a8s-postgresql", "instanceRef": "example-a8s-postgresql",
          "serviceInstanceType": "postgresql", "compositionRef": {"name": "a8s-restore"}}),
    # Klutch's servicebinding_definition.yaml (81666008) leaves keyvalue out of
    # serviceInstanceType, refusing Klutch's own example.
    Case(f"{EXAMPLES}/a9s/keyvalue/servicebinding-claim.yaml@a374e6f3", "ServiceBinding",
         a9s_claim("keyvalue", "a9s-servicebinding"), ('Unsupported value: "keyvalue"',),
         ours_accepts="KeyValue bindings"),
    Case(f"{EXAMPLES}/a9s/keyvalue/backup-claim.yaml@fa2e8f97", "Backup",
         a9s_claim("keyvalue", "a9s-backup")),
    Case(f"{EXAMPLES}/a9s/keyvalue/restore-claim.yaml@a374e6f3", "Restore",
         a9s_claim("keyvalue", "a9s-restore")),
    *(
        Case(f"{EXAMPLES}/a9s/{service}/{file}-claim.yaml@{commit}", kind,
             a9s_claim(service, f"a9s-{file}"))
        for service, commits in (
            ("logme2", ("3bb6ce43", "3bb6ce43", "8c16f857")),
            ("mariadb", ("3bb6ce43", "3bb6ce43", "8c16f857")),
            ("mongodb", ("3bb6ce43", "8c16f857", "8c16f857")),
            ("postgresql", ("3bb6ce43", "3bb6ce43", "3bb6ce43")),
            ("prometheus", ("8c16f857", "3bb6ce43", "3bb6ce43")),
            ("search", ("3bb6ce43", "3bb6ce43", "8c16f857")),
        )
        for (file, kind), commit in zip(
            (("servicebinding", "ServiceBinding"), ("backup", "Backup"), ("restore", "Restore")),
            commits, strict=True,
        )
    ),
    Case(f"{EXAMPLES}/a9s/messaging/servicebinding-claim.yaml@8c16f857", "ServiceBinding",
         {"instanceRef": "example-a9s-messaging", "serviceInstanceType": "messaging",
          "compositionRef": {"name": "a9s-servicebinding"}}),
    Case(f"{EXAMPLES}/a9s/messaging/backup-claim.yaml@8c16f857", "Backup",
         {"instanceRef": "example-a9s-messaging", "serviceInstanceType": "messaging",
          "compositionRef": {"name": "a9s-backup"}}),
    Case(f"{EXAMPLES}/a9s/messaging/restore-claim.yaml@3bb6ce43", "Restore",
         {"backupRef": "example-a9s-messaging", "serviceInstanceType": "messaging",
          "compositionRef": {"name": "a9s-restore"}}),
]  # fmt: skip

PG = f"{VALIDATIONS}/postgresql"
S, ST, SS, SB = (SMALLER,), (SMALLER, TO_SINGLE), (SMALLER, SSL), (SMALLER, BIONIC)
UPDATES = [
    *plans(
        f"{PG}/update-a8s-plan-replica-large.yaml@98088f4e",
        pg("a9s-postgresql13", "postgresql-replica-big", "a8s-postgresql"),
        [],
        [("postgresql-replica-nano", S), ("postgresql-replica-small", S),
         ("postgresql-replica-medium", S), ("postgresql-single-nano", ST),
         ("postgresql-single-small", ST), ("postgresql-single-medium", ST),
         ("postgresql-single-big", (TO_SINGLE,))],
    ),
    *plans(
        f"{PG}/update-a8s-plan-replica-medium.yaml@8c16f857",
        pg("a9s-postgresql13", "postgresql-replica-medium", "a8s-postgresql"),
        [],
        [("postgresql-replica-large", (PLAN,)),  # the file's valid patch; see the docstring
         ("postgresql-replica-nano", S), ("postgresql-replica-small", S),
         ("postgresql-single-nano", ST), ("postgresql-single-small", ST),
         ("postgresql-single-medium", (TO_SINGLE,)),
         ("postgresql-single-large", (PLAN, TO_SINGLE))],
    ),
    *plans(
        f"{PG}/update-a8s-plan-replica-nano.yaml@3bb6ce43",
        pg("a9s-postgresql13", "postgresql-replica-nano", "a8s-postgresql"),
        ["postgresql-replica-small", "postgresql-replica-medium"],
        [("postgresql-replica-large", (PLAN,)),  # the file's valid patch; see the docstring
         ("postgresql-single-nano", (TO_SINGLE,)), ("postgresql-single-small", (TO_SINGLE,)),
         ("postgresql-single-medium", (TO_SINGLE,)),
         ("postgresql-single-large", (PLAN, TO_SINGLE))],
    ),
    *plans(
        f"{PG}/update-a8s-plan-replica-small.yaml@98088f4e",
        pg("a9s-postgresql13", "postgresql-replica-small", "a8s-postgresql"),
        ["postgresql-replica-medium", "postgresql-replica-big"],
        [("postgresql-replica-nano", S), ("postgresql-single-nano", ST),
         ("postgresql-single-small", (TO_SINGLE,)), ("postgresql-single-medium", (TO_SINGLE,)),
         ("postgresql-single-big", (TO_SINGLE,))],
    ),
    *plans(
        f"{PG}/update-a8s-plan-single-large.yaml@45b0fecf",
        pg("a9s-postgresql13", "postgresql-single-big", "a8s-postgresql"),
        ["postgresql-replica-big"],
        [("postgresql-single-nano", S), ("postgresql-single-small", S),
         ("postgresql-single-medium", S), ("postgresql-replica-nano", S),
         ("postgresql-replica-small", S), ("postgresql-replica-medium", S)],
    ),
    *plans(
        f"{PG}/update-a8s-plan-single-medium.yaml@45b0fecf",
        pg("a9s-postgresql13", "postgresql-single-medium", "a8s-postgresql"),
        ["postgresql-single-big", "postgresql-replica-medium", "postgresql-replica-big"],
        [("postgresql-single-nano", S), ("postgresql-single-small", S),
         ("postgresql-replica-nano", S), ("postgresql-replica-small", S)],
    ),
    *plans(
        f"{PG}/update-a8s-plan-single-nano.yaml@3bb6ce43",
        pg("a9s-postgresql13", "postgresql-single-nano", "a8s-postgresql"),
        ["postgresql-single-small", "postgresql-single-medium", "postgresql-replica-small",
         "postgresql-replica-medium"],
        [("postgresql-single-large", (PLAN,)),  # the file's valid patches; see the docstring
         ("postgresql-replica-large", (PLAN,))],
    ),
    *plans(
        f"{PG}/update-a8s-plan-single-small.yaml@77f4b42d",
        pg("a9s-postgresql13", "postgresql-single-small", "a8s-postgresql"),
        ["postgresql-single-medium", "postgresql-single-big", "postgresql-replica-small",
         "postgresql-replica-medium", "postgresql-replica-big"],
        [("postgresql-single-nano", S), ("postgresql-replica-nano", S)],
    ),
    *plans(
        f"{PG}/update-a9s-plan-single-big.yaml@77f4b42d",
        pg("a9s-postgresql13", "postgresql-single-big", "a9s-postgresql"),
        ["postgresql-replica-big"],
        [("postgresql-single-nano", S), ("postgresql-single-small", S),
         ("postgresql-replica-small", S), ("postgresql-single-nano-ssl", SS),
         ("postgresql-single-small-ssl", SS), ("postgresql-single-big-ssl", (SSL,)),
         ("postgresql-single-nano-bionic", SB), ("postgresql-single-small-bionic", SB),
         ("postgresql-single-big-bionic", (BIONIC,))],
    ),
    *plans(
        f"{PG}/update-a9s-plan-single-nano-ssl.yaml@3bb6ce43",
        pg("a9s-postgresql13", "postgresql-single-nano-ssl", "a9s-postgresql"),
        ["postgresql-single-small-ssl", "postgresql-replica-small-ssl"],
        [("postgresql-single-medium-ssl", (PLAN,)),  # the file's valid patches; see the docstring
         ("postgresql-replica-medium-ssl", (PLAN,)),
         ("postgresql-single-nano", (SSL,)), ("postgresql-single-small", (SSL,)),
         ("postgresql-single-medium", (PLAN, SSL)),
         ("postgresql-single-nano-ssl-bionic", (BIONIC,)),
         ("postgresql-single-small-ssl-bionic", (BIONIC,)),
         ("postgresql-single-medium-ssl-bionic", (PLAN, BIONIC))],
    ),
    *plans(
        f"{PG}/update-a9s-plan-single-nano.yaml@45b0fecf",
        pg("a9s-postgresql13", "postgresql-single-nano", "a9s-postgresql"),
        ["postgresql-single-small", "postgresql-single-big", "postgresql-replica-small",
         "postgresql-replica-big"],
        [("postgresql-single-nano-ssl", (SSL,)), ("postgresql-single-small-ssl", (SSL,)),
         ("postgresql-single-big-ssl", (SSL,)), ("postgresql-single-nano-bionic", (BIONIC,)),
         ("postgresql-single-small-bionic", (BIONIC,)),
         ("postgresql-single-big-bionic", (BIONIC,))],
    ),
    *plans(
        f"{PG}/update-a9s-plan-single-small.yaml@3bb6ce43",
        pg("a9s-postgresql13", "postgresql-single-small", "a9s-postgresql"),
        ["postgresql-replica-small"],
        [("postgresql-single-medium", (PLAN,)),  # the file's valid patches; see the docstring
         ("postgresql-replica-medium", (PLAN,)),
         ("postgresql-single-nano", S), ("postgresql-single-nano-ssl", SS),
         ("postgresql-single-small-ssl", (SSL,)), ("postgresql-single-medium-ssl", (PLAN, SSL)),
         ("postgresql-single-nano-bionic", SB), ("postgresql-single-small-bionic", (BIONIC,)),
         ("postgresql-single-medium-bionic", (PLAN, BIONIC))],
    ),
    *(
        Case(source, "PostgresqlInstance", {"service": service}, refused,
             pg("a9s-postgresql13", "postgresql-single-nano", composition))
        for source, composition, service, refused in (
            (f"{PG}/update-a8s-service.yaml@4266fe59", "a8s-postgresql", "a9s-postgresql14",
             (IMMUTABLE,)),
            (f"{PG}/update-a8s-service.yaml@4266fe59", "a8s-postgresql", "a9s-postgresql13", None),
            (f"{PG}/update-a9s-service.yaml@8c16f857", "a9s-postgresql", "a9s-postgresql15",
             (IMMUTABLE,)),
            (f"{PG}/update-a9s-service.yaml@8c16f857", "a9s-postgresql", "a9s-postgresql13", None),
        )
    ),
]  # fmt: skip
CASES = CREATES + UPDATES


def case_id(case: Case) -> str:
    path = case.source.split("@")[0].rsplit("/", 1)[-1]
    change = (case.spec.get("plan") or case.spec.get("service")) if case.base else None
    return f"{path}-{change}" if change else path


def plural(kind: str) -> str:
    return XRDS[kind]["spec"]["claimNames"]["plural"]


def rule_messages(kind: str) -> set[str]:
    """Every message of the kind's CEL rules, wherever in the schema they sit."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.update(rule["message"] for rule in node.get("x-kubernetes-validations", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(XRDS[kind]["spec"]["versions"][0]["schema"])
    return found


def kubectl_request(kube: Kube, method: str, path: str, body: Spec, content_type: str) -> None:
    """What ``kubectl apply|patch --dry-run=server`` sends: a dry run with strict field checks."""
    kube._call(
        method,
        path,
        query=[("dryRun", "All"), ("fieldValidation", "Strict")],
        body=body,
        content_type=content_type,
    )


def claim(case: Case, name: str, namespace: str, spec: Spec) -> Spec:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": case.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def outcomes(clusters: dict[str, client.ApiClient]) -> Iterator[dict[int, str | None]]:
    """Each case's outcome: None if the Control Plane accepted it, else its 422 message."""
    with catalog_offered(clusters) as admin:
        namespace = f"corpus-{uuid.uuid4().hex[:6]}"
        admin.create(NAMESPACES, {"metadata": {"name": namespace}})
        bases = {case.source: case for case in UPDATES}
        names = {source: f"update-{i}" for i, source in enumerate(bases)}
        for source, case in bases.items():  # applied for real, as Klutch's runner does
            assert case.base is not None
            admin.create(claims(case.kind), claim(case, names[source], namespace, case.base))

        def run(case: Case) -> str | None:
            resource = claims(case.kind)
            try:
                if case.base is None:
                    body = claim(case, "sample", namespace, case.spec)
                    path = resource.path(namespace, None)
                    kubectl_request(admin, "POST", path, body, "application/json")
                else:
                    path = resource.path(namespace, names[case.source])
                    patch = {"spec": case.spec}
                    kubectl_request(admin, "PATCH", path, patch, "application/merge-patch+json")
            except KubeError as error:
                if error.status != 422:  # only "invalid" is a verdict
                    raise
                return error.message
            return None

        try:
            with ThreadPoolExecutor(max_workers=6) as pool:
                yield dict(enumerate(pool.map(run, CASES)))
        finally:
            for source, case in bases.items():
                admin.delete(claims(case.kind), namespace, names[source])
            eventually(
                lambda: all(
                    admin.get(claims(case.kind), namespace, names[source]) is None
                    for source, case in bases.items()
                ),
                "the update cases' live claims and their XRs to be deleted",
                timeout=120,
            )
            admin.delete(NAMESPACES, None, namespace)


def claims(kind: str) -> Resource:
    return Resource(GROUP, "v1", plural(kind), kind)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_klutchs_corpus_case_gets_klutchs_verdict(
    outcomes: dict[int, str | None], index: int
) -> None:
    case, message = CASES[index], outcomes[index]
    if case.ours_accepts:  # a deliberate difference, named in catalog/README.md
        assert case.refused is not None
        assert message is None, f"{case.source}: {case.ours_accepts}: we refused: {message}"
        return
    if case.refused is None:
        assert message is None, f"{case.source}: Klutch accepts it, we refused: {message}"
        return
    assert message is not None, f"{case.source}: Klutch refuses it, we accepted it"
    for stated in case.refused:
        assert stated in message, f"{case.source}: {stated!r} not in {message!r}"
    ours = {rule for rule in rule_messages(case.kind) if rule in message}
    assert ours == set(case.refused) & rule_messages(case.kind), (case.source, message)


def test_the_corpus_is_written_as_read() -> None:
    """Every case names a Klutch file and a commit, and update cases patch one field."""
    for case in CASES:
        path, _, commit = case.source.partition("@")
        assert path.startswith((VALIDATIONS, EXAMPLES))
        assert re.fullmatch("[0-9a-f]{8}", commit)
        assert case.kind in XRDS
        assert case.base is None or len(case.spec) == 1
