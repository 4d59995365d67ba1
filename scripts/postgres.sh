# Sourced by scripts/test.sh (and so by .ci/run): makes sure the tests have a PostgreSQL
# and exports SWITCHYARD_TEST_POSTGRES_URL. A URL already set is used as it is.
# Otherwise the server on 127.0.0.1:5432 is used, as user `postgres` without a password
# (trust, as on the development machines); a Debian cluster that is installed but down
# is started; with none installed, Debian's `postgresql` is installed (as root) with
# trust for 127.0.0.1 and started. Every test creates and drops a database of its own.

pg_answers() { # host port
  if command -v pg_isready >/dev/null; then
    pg_isready -q -h "$1" -p "$2"
  else
    { exec 4<>"/dev/tcp/$1/$2"; } 2>/dev/null && exec 4<&- 4>&-
  fi
}

pg_cluster_version() { ls /etc/postgresql 2>/dev/null | sort -n | tail -n 1; }

ensure_postgres() {
  if [ -n "${SWITCHYARD_TEST_POSTGRES_URL:-}" ]; then
    return 0
  fi
  if ! pg_answers 127.0.0.1 5432; then
    if [ -z "$(pg_cluster_version)" ]; then
      if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "error: the tests need PostgreSQL: none answers on 127.0.0.1:5432 and none is installed (install Debian's postgresql with trust for 127.0.0.1, or set SWITCHYARD_TEST_POSTGRES_URL)" >&2
        return 1
      fi
      echo "Installing PostgreSQL for the tests..."
      apt-get update -q
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql
      local hba
      hba=/etc/postgresql/$(pg_cluster_version)/main/pg_hba.conf
      sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    fi
    echo "Starting the PostgreSQL cluster $(pg_cluster_version)/main for the tests."
    pg_ctlcluster --skip-systemctl-redirect "$(pg_cluster_version)" main start || true
    for _ in $(seq 100); do
      pg_answers 127.0.0.1 5432 && break
      sleep 0.1
    done
    if ! pg_answers 127.0.0.1 5432; then
      echo "error: PostgreSQL did not start on 127.0.0.1:5432 (see /var/log/postgresql)" >&2
      return 1
    fi
  fi
  export SWITCHYARD_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres
}
