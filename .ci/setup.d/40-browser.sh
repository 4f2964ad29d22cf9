# Review-page browser test: chromium (apt) + playwright-core (npm, pinned, project-local).
eval "$(scripts/browser-setup.sh)"
