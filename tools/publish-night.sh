#!/usr/bin/env bash
# The matrix workflow's publish job: the night's GPU results kept on the evidence branch, the matrix of every
# release built from it, the branch pushed and its pull request into the base branch opened.
#
#   tools/publish-night.sh ARTIFACTS RUNNERS_JSON
#
# Why a branch and a pull request: a protected base branch (required reviews, a ruleset) refuses a push by the
# workflow's token, and no ruleset lets that token bypass it. The branch `evidence/<base>` is never protected,
# holds every night not yet merged (each night starts from it, so an unmerged night is never lost), and reaches
# the base branch the way any change does, by review. A push that finds the branch moved (a merge during the
# night) starts over from the moved branch, up to three times.
#
# Environment: BASE (the branch the workflow ran on), RUN_URL (this run's page), GITHUB_TOKEN (for git and gh),
# ATTEST (true: the cell jobs attested their results, and only what verifies as this run's is read),
# GITHUB_SERVER_URL, GITHUB_REPOSITORY, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, RUNNER_TEMP: all GitHub's own.
set -euo pipefail

artifacts=${1:?give the folder of the night artifacts}
runners=${2:?give the plan of the runners (JSON)}
base=${BASE:?BASE names the branch the workflow ran on}
branch="evidence/$base"
auth=$(printf 'x-access-token:%s' "${GITHUB_TOKEN:?}" | base64 -w0)
# The checkout keeps no credential: the token is given to each command that talks to the repository.
remote() { git -c "http.$GITHUB_SERVER_URL/.extraheader=AUTHORIZATION: basic $auth" "$@"; }
export GH_TOKEN=$GITHUB_TOKEN

# Each runner's result and environment record must carry an attestation signed by this workflow in this run;
# one that does not is set aside (the run's artifact keeps it) and intake never sees it.
set_aside_the_unattested() {
  local artifact file made
  for artifact in $(python -c 'import json, sys; print(*(j["artifact"] for j in json.load(open(sys.argv[1]))["include"]))' "$runners"); do
    [ -d "$artifacts/$artifact" ] || continue
    while IFS= read -r -d '' file; do
      made=$(gh attestation verify "$file" --repo "$GITHUB_REPOSITORY" \
        --signer-workflow "$GITHUB_REPOSITORY/.github/workflows/matrix.yml" --format json \
        --jq '.[0].verificationResult.signature.certificate.runInvocationURI') || made=""
      case "$made" in
        "$RUN_URL"/attempts/*) ;;
        *)
          echo "not kept: $file has no attestation of this run (${made:-none verifies})" | tee -a "$GITHUB_STEP_SUMMARY"
          mkdir -p "$RUNNER_TEMP/unattested/$(dirname "$file")"
          mv "$file" "$RUNNER_TEMP/unattested/$file"
          ;;
      esac
    done < <(find "$artifacts/$artifact" -type f \( -name '*.xml' -o -name '*.env.json' \) -print0)
  done
}
if [ "${ATTEST:-}" = true ]; then
  set_aside_the_unattested
fi

git config user.name "github-actions[bot]"
git config user.email "41898282+github-actions[bot]@users.noreply.github.com"

added=0
for attempt in 1 2 3; do
  remote fetch --quiet origin "+refs/heads/$base:refs/remotes/origin/$base"
  # ls-remote exits 2 where the branch does not exist (its pull request merged and the branch deleted).
  status=0
  remote ls-remote --exit-code --heads origin "$branch" >/dev/null || status=$?
  if [ "$status" -eq 0 ]; then
    remote fetch --quiet origin "+refs/heads/$branch:refs/remotes/origin/$branch"
    git checkout --quiet -B "$branch" "origin/$branch"
    # The base's code and its matrix win where both changed; the branch adds records, which never collide.
    git merge --quiet --no-edit -X theirs "origin/$base"
  elif [ "$status" -eq 2 ]; then
    git checkout --quiet -B "$branch" "origin/$base"
  else
    exit "$status"
  fi

  # Only native and emulated results, each from the artifact of the runner its cell was planned for, made by
  # this run; predictions and misrouted cells are not kept. A record already there is not added again.
  rm -f "$RUNNER_TEMP/evidence.out"
  python -m matrix evidence add "$artifacts" --source runner --runners "$runners" --workflow-run "$RUN_URL" \
    --github-output "$RUNNER_TEMP/evidence.out" | tee "$RUNNER_TEMP/evidence.txt"
  added=$(sed -n 's/^added=//p' "$RUNNER_TEMP/evidence.out")
  if [ "$added" = 0 ]; then
    break
  fi

  # What `nox -s publish` writes, from the committed history instead of recomputing it. Exit 1 is a matrix with
  # cells to look at (a native regression is news to publish); only 2, an error, stops here.
  rm -rf results/history
  mkdir -p results/history
  tar -xJf docs/evidence/history.tar.xz -C results/history
  cp docs/matrix/compat.json "$RUNNER_TEMP/previous.json"
  python -m matrix report results/history --evidence docs/evidence/runs --probes docs/evidence/runs/probes \
    --engine-bench docs/evidence/runs/engine-bench \
    --bench docs/bench --previous "$RUNNER_TEMP/previous.json" --out docs/matrix || test $? -eq 1
  python -m matrix doctor-matrix docs/matrix/compat.json --out matrix/doctor/matrix.json
  cp matrix/doctor/matrix.json docs/matrix/doctor.json
  git add docs/evidence/runs docs/matrix matrix/doctor/matrix.json
  git commit --quiet -m "Evidence: $added new GPU result(s) from $RUN_URL"
  if remote push --quiet origin "HEAD:refs/heads/$branch"; then
    break
  fi
  if [ "$attempt" -eq 3 ]; then
    echo "::error title=evidence branch::$branch moved under three pushes in a row; the night's results stay in its artifacts"
    exit 1
  fi
  echo "::notice title=evidence branch::$branch moved during the night: starting again from it (try $((attempt + 1)) of 3)"
done

cat "$RUNNER_TEMP/evidence.txt" >>"$GITHUB_STEP_SUMMARY"
echo "added=$added" >>"$GITHUB_OUTPUT"
if [ "$added" = 0 ]; then
  exit 0
fi

# One pull request carries every night not yet merged: opened by the first, updated by each later push.
pull=$(gh pr list --repo "$GITHUB_REPOSITORY" --head "$branch" --base "$base" --state open --json url --jq '.[].url')
if [ -z "$pull" ]; then
  pull=$(gh pr create --repo "$GITHUB_REPOSITORY" --head "$branch" --base "$base" \
    --title "Evidence: the nightly GPU results not yet in $base" \
    --body "Each commit is one night of the matrix workflow: the GPU results its runners brought (docs/evidence/runs/) and the matrix made with them. The published page already shows them; merging keeps them in $base. Opened by $RUN_URL.")
fi
echo "The night's records are on \`$branch\`, in $pull" | tee -a "$GITHUB_STEP_SUMMARY"
cp -r docs/matrix site
echo "deploy=true" >>"$GITHUB_OUTPUT"
