"""The configs as pydantic models, the one source of their checks and of the schemas published
from them (``schemas/``, the chart's ``values.schema.json``, the RepositoryBinding CRD)."""
