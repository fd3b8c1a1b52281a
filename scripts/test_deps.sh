#!/bin/sh
# Installs what the test suite needs beyond .venv, from Debian's packages:
# - chromium, in which tests/test_cli_runs.py renders a run's report.html;
# - PostgreSQL and MariaDB servers, started here (no systemd needed), each with a user
#   beam_pipeline (password bp4tests) that may create databases named
#   beam_pipeline_test*, where tests/test_metadata_server.py puts the metadata store
#   (postgresql://...@127.0.0.1:5432, mysql://...@127.0.0.1:3306); PostgreSQL also
#   takes TLS (a self-signed certificate).
# A test whose program or server is missing is skipped, saying why; under .ci/run
# (BEAM_PIPELINE_TEST_REQUIRE_SERVICES=1) it fails instead, naming it. Needs root and
# apt-get (Debian/Ubuntu); elsewhere it says so and does nothing. Never fails itself: the
# tests that need what it could not start say so. Safe to run again (installs only what
# is missing, starts only what is down).
# Usage: sh scripts/test_deps.sh
LOG=/tmp/beam-pipeline-test-deps.log
DB_USER=beam_pipeline
DB_PASSWORD=bp4tests
DB_NAME=beam_pipeline_test

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "test deps: not root or no apt-get; install chromium, PostgreSQL and MariaDB yourself to run the browser and server-database tests"
  exit 0
fi
: >"$LOG"

missing=""
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
  missing="$missing chromium"
command -v pg_ctlcluster >/dev/null 2>&1 || missing="$missing postgresql"
command -v mysqld_safe >/dev/null 2>&1 || missing="$missing mariadb-server"
if [ -n "$missing" ]; then
  echo "test deps: installing$missing (apt-get)"
  # Bounded: a mirror that does not answer must not hold the test run (timeout is coreutils').
  if ! { timeout 300 apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq $missing; } \
    >>"$LOG" 2>&1; then
    echo "test deps: apt-get could not install$missing (see $LOG); the tests that need them will be skipped (fail in CI)"
  fi
else
  echo "test deps: chromium, PostgreSQL and MariaDB are installed"
fi

# PostgreSQL: the first cluster Debian's package created, started with pg_ctlcluster.
if command -v pg_ctlcluster >/dev/null 2>&1; then
  cluster=$(pg_lsclusters -h 2>>"$LOG" | head -n 1)
  if [ -z "$cluster" ]; then
    version=$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -n 1)
    timeout 120 pg_createcluster "$version" main >>"$LOG" 2>&1
    cluster=$(pg_lsclusters -h 2>>"$LOG" | head -n 1)
  fi
  set -- $cluster
  # TLS with a self-signed certificate, for the tests of ?sslmode=require.
  if [ -n "$cluster" ] && [ "$(pg_conftool -s "$1" "$2" show ssl 2>/dev/null)" != on ] \
    && command -v openssl >/dev/null 2>&1; then
    key=/etc/postgresql/$1/$2/beam-pipeline-test.key
    crt=/etc/postgresql/$1/$2/beam-pipeline-test.crt
    if timeout 60 openssl req -new -x509 -days 3650 -nodes -subj /CN=localhost \
      -keyout "$key" -out "$crt" >>"$LOG" 2>&1; then
      chown postgres "$key" "$crt" && chmod 600 "$key"
      pg_conftool "$1" "$2" set ssl_cert_file "$crt"
      pg_conftool "$1" "$2" set ssl_key_file "$key"
      pg_conftool "$1" "$2" set ssl on
      [ "$4" = online ] && timeout 120 pg_ctlcluster "$1" "$2" restart >>"$LOG" 2>&1
    fi
  fi
  if [ -n "$cluster" ] && { [ "$4" = online ] || timeout 120 pg_ctlcluster "$1" "$2" start >>"$LOG" 2>&1; } \
    && timeout 60 su postgres -s /bin/sh -c "psql -p $3 -v ON_ERROR_STOP=1 -q" >>"$LOG" 2>&1 <<EOF
DO \$\$BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN
    CREATE ROLE $DB_USER;
  END IF;
END\$\$;
ALTER ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASSWORD';
SELECT 'CREATE DATABASE $DB_NAME OWNER $DB_USER'
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB_NAME')\gexec
EOF
  then
    echo "test deps: PostgreSQL $1 is running on port $3 (user $DB_USER, database $DB_NAME)"
  else
    echo "test deps: could not start PostgreSQL or create its test user (see $LOG); its tests will be skipped (fail in CI)"
  fi
fi

# MariaDB: Debian's init script (service) starts mysqld_safe without systemd.
if command -v mysqld_safe >/dev/null 2>&1; then
  if { timeout 30 mysqladmin ping >/dev/null 2>&1 || timeout 120 service mariadb start >>"$LOG" 2>&1; } \
    && timeout 60 mysql >>"$LOG" 2>&1 <<EOF
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
CREATE USER IF NOT EXISTS '$DB_USER'@'%' IDENTIFIED BY '$DB_PASSWORD';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
ALTER USER '$DB_USER'@'%' IDENTIFIED BY '$DB_PASSWORD';
GRANT ALL PRIVILEGES ON \`$DB_NAME%\`.* TO '$DB_USER'@'localhost';
GRANT ALL PRIVILEGES ON \`$DB_NAME%\`.* TO '$DB_USER'@'%';
CREATE DATABASE IF NOT EXISTS $DB_NAME;
EOF
  then
    echo "test deps: MariaDB is running (user $DB_USER, database $DB_NAME)"
  else
    echo "test deps: could not start MariaDB or create its test user (see $LOG); its tests will be skipped (fail in CI)"
  fi
fi
exit 0
