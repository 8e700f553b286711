# SPDX-License-Identifier: Apache-2.0
"""kstage.usd: OpenUSD in and out of a kstage stage (docs/usd.md).

Needs OpenUSD's Python modules (``pip install kstage[usd]``, which brings ``usd-core``).

    import kstage, kstage.usd

    stage = kstage.Stage()
    pop = kstage.usd.populate(stage, "robot.usda", 1)   # every prim and authored value
    stage.seal(1)
    pop.resample(2, time=24.0); stage.seal(2)            # one tick of an animated scene
    kstage.usd.export(stage, "results.usda", xform_since=pop.ordinal)

populate() maps every composed prim to a prim at its path and every authored attribute to a
column by the type mapping of docs/usd.md; LayerWriter / export() write the sealed state or a
change range back as a USD layer, an ``over`` of the source scene or a standalone one, with
values as defaults or as time samples.
"""
from ._errors import UsdError
from ._export import ExportReport, LayerWriter, export
from ._mapping import Schema, UsdType, table as type_table
from ._populate import Population, PopulateReport, Unmapped, open_usd, populate

__all__ = ["UsdError", "ExportReport", "LayerWriter", "export", "Schema", "UsdType",
           "type_table", "Population", "PopulateReport", "Unmapped", "open_usd", "populate"]
