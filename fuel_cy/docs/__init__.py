"""The reference site's renderer: kernel pages from the contracts (through codegen's model and the
Python-facing text), the Performance and Precision pages from the recorded results (with the
harness's targets and bounds), and the mkdocs and griffe hooks that put them in the site.  Above
codegen, harness and workspace; nothing in the package imports it (mkdocs does)."""
