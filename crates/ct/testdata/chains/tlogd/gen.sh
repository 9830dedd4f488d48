#!/bin/sh
# Regenerates the tlogd test chains (run in this directory; needs OpenSSL 3). The keys
# are thrown away: the tests only verify. What each file exercises:
#   root.pem        P-384 key, self-signed with ecdsa-with-SHA256 (a shorter digest than the curve)
#   int-a.pem       P-521 key, CA pathlen:0, signed by root with ecdsa-with-SHA512 (digest truncated to P-384)
#   leaf-a.pem      P-256 key, signed by int-a with ecdsa-with-SHA256 (digest padded for P-521)
#   int-b.pem       RSA-2048 key, CA, signed by int-a (int-a's pathlen:0 forbids int-b below it)
#   leaf-b.pem      signed by int-b with sha512WithRSAEncryption
#   leaf-c.pem      signed by int-b with sha384WithRSAEncryption, no extKeyUsage
#   leaf-p.pem      signed by int-b with RSASSA-PSS (SHA-256, MGF1-SHA-256, salt 32)
#   notca.pem       P-256 key, basicConstraints cA:FALSE, signed by root with ecdsa-with-SHA384
#   leaf-n.pem      signed by notca
#   ed-root.pem     Ed25519 self-signed CA; ed-leaf.pem: signed by it
set -eu
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ca="basicConstraints=critical,CA:TRUE
keyUsage=critical,keyCertSign,cRLSign
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid"
printf '%s\n' "$ca" > "$T/ca.ext"
printf '%s\n' "basicConstraints=critical,CA:TRUE,pathlen:0
keyUsage=critical,keyCertSign,cRLSign
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid" > "$T/ca0.ext"
printf '%s\n' "basicConstraints=critical,CA:FALSE
extendedKeyUsage=serverAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid" > "$T/leaf.ext"
printf '%s\n' "basicConstraints=critical,CA:FALSE
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid" > "$T/leaf-noeku.ext"
key() { openssl genpkey -quiet "$@"; }
key -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out "$T/root.key"
key -algorithm EC -pkeyopt ec_paramgen_curve:P-521 -out "$T/int-a.key"
key -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$T/leaf.key"
key -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$T/int-b.key"
key -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$T/notca.key"
key -algorithm ED25519 -out "$T/ed-root.key"
key -algorithm ED25519 -out "$T/ed-leaf.key"
openssl req -x509 -new -key "$T/root.key" -sha256 -days 36500 -subj "/O=tlogd test/CN=tlogd test root" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out root.pem
# issue NAME KEY ISSUER ISSUER_KEY DIGEST EXT SUBJECT
issue() {
  openssl req -new -key "$2" -subj "$7" -out "$T/$1.csr"
  openssl x509 -req -in "$T/$1.csr" -CA "$3" -CAkey "$4" -"$5" -days 36500 -set_serial "0x$(openssl rand -hex 8)" \
    -extfile "$6" -out "$1.pem"
}
issue int-a "$T/int-a.key" root.pem "$T/root.key" sha512 "$T/ca0.ext" "/O=tlogd test/CN=tlogd test intermediate A"
issue leaf-a "$T/leaf.key" int-a.pem "$T/int-a.key" sha256 "$T/leaf.ext" "/O=tlogd test/CN=leaf-a.example"
issue int-b "$T/int-b.key" int-a.pem "$T/int-a.key" sha384 "$T/ca.ext" "/O=tlogd test/CN=tlogd test intermediate B"
issue leaf-b "$T/leaf.key" int-b.pem "$T/int-b.key" sha512 "$T/leaf.ext" "/O=tlogd test/CN=leaf-b.example"
issue leaf-c "$T/leaf.key" int-b.pem "$T/int-b.key" sha384 "$T/leaf-noeku.ext" "/O=tlogd test/CN=leaf-c.example"
openssl req -new -key "$T/leaf.key" -subj "/O=tlogd test/CN=leaf-p.example" -out "$T/leaf-p.csr"
openssl x509 -req -in "$T/leaf-p.csr" -CA int-b.pem -CAkey "$T/int-b.key" -sha256 -days 36500 -set_serial 9 \
  -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:digest -sigopt rsa_mgf1_md:sha256 \
  -extfile "$T/leaf.ext" -out leaf-p.pem
issue notca "$T/notca.key" root.pem "$T/root.key" sha384 "$T/leaf.ext" "/O=tlogd test/CN=tlogd test not a CA"
issue leaf-n "$T/leaf.key" notca.pem "$T/notca.key" sha256 "$T/leaf.ext" "/O=tlogd test/CN=leaf-n.example"
openssl req -x509 -new -key "$T/ed-root.key" -days 36500 -subj "/O=tlogd test/CN=tlogd test Ed25519 root" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ed-root.pem
openssl req -new -key "$T/ed-leaf.key" -subj "/O=tlogd test/CN=ed-leaf.example" -out "$T/ed-leaf.csr"
openssl x509 -req -in "$T/ed-leaf.csr" -CA ed-root.pem -CAkey "$T/ed-root.key" -days 36500 -set_serial 7 \
  -extfile "$T/leaf.ext" -out ed-leaf.pem
