# Sourced by the set-up scripts: a message prefix and apt-get with one update per run.
say() { echo "setup: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    say "must run as root (apt packages, kernel headers); try: sudo make setup"
    exit 1
fi

apt_updated=0
apt_update_once() {
    if [ "$apt_updated" -eq 0 ]; then
        say "apt-get update"
        apt-get update -qq >/dev/null
        apt_updated=1
    fi
}
apt_install() {
    apt_update_once
    say "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
# The Debian packages of those named that are not installed yet, installed.
apt_ensure() {
    local missing=() package
    for package in "$@"; do
        dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}
