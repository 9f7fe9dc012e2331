"""Which broker's DLedger-mode recovery `jobs.recover` applies: the store's generation, decided as for a plain store
(--rocketmq-version, else the marker files: jobs.pipeline.store.markers), never 4.9.8's by default. 4.x: RocketMQ
4.9.8's (jobs.pipeline.recover.dledger); 5.x: RocketMQ 5.3.3's (jobs.pipeline.recover.dledger_v5). The plan states
the generation, its evidence and the model; the job names them on stderr."""
from __future__ import annotations

from storage_format.markers import GenerationGuess
from storage_format.settings import BrokerSettings

from ..io.fs import Location
from ..store.markers import StoreMarkers
from .dledger import DLedgerRecoveryPlan, plan_dledger_recovery
from .dledger_v5 import plan_dledger_v5_recovery


def dledger_generation(store: Location, given: int | None) -> GenerationGuess:
    """--rocketmq-version when given, else what the store's marker files say (abort's PID, abort.bak, the
    checkpoint's 5.x fields)."""
    return StoreMarkers.read(store).generation(given)


def plan_dledger_store(sc, store: Location, settings: BrokerSettings, work: Location, *, generation: int | None = None,
                       **kw) -> DLedgerRecoveryPlan:
    """The DLedger-mode recovery plan under the store's generation (4.9.8's model for 4.x, 5.3.3's for 5.x)."""
    gen = dledger_generation(store, generation)
    planner = plan_dledger_v5_recovery if gen.generation >= 5 else plan_dledger_recovery
    return planner(sc, store, settings, work, gen=gen, **kw)


def named_lines(plan: DLedgerRecoveryPlan) -> list[str]:
    """What the job names on stderr: the generation with its evidence and the model applied, then the broker's
    quirks the plan models (5.3.3's end computed without entry headers, the records it indexes twice)."""
    g = plan.generation
    return [f"DLedger mode, RocketMQ {g.label}: {'; '.join(g.evidence)}", *plan.plan.named]
