"""The diffusers pipelines, one folder each, named as in diffusers' `pipelines/`."""
