# What the hive and swarm modules share: how a secret reaches a unit
# (systemd LoadCredential, never the Nix store), how a generated config is
# checked at build time (the daemon's own `--check-config`), the option
# types for secret paths and NATS, the option blocks both modules declare
# the same way (`package`, `checkConfig`, `configFile`, `settings`), and the
# unit hardening. The options keep their paths: each module places the
# blocks under its own prefix.
#
# Plain functions of `lib`; nothing here declares options by itself.
{ lib }:
let
  inherit (lib) mkOption types;
in
rec {
  # A path as a string. A Nix path literal (./secret) is refused: it would be
  # copied into the world-readable store.
  absolutePath = types.strMatching "/.+" // {
    description = "absolute path, as a string";
  };

  # Where systemd exposes a unit's LoadCredential files.
  credentialDir = unit: "/run/credentials/${unit}.service";

  # An optional file (a secret, or one the daemon reads next to secrets) that
  # reaches the unit through LoadCredential.
  secretFileOption =
    exampleName: what:
    mkOption {
      type = types.nullOr absolutePath;
      default = null;
      example = "/var/lib/secrets/hyperhive/${exampleName}";
      description = ''
        ${what}. systemd reads it at start (LoadCredential) and hands the
        daemon a copy under /run/credentials/; it never enters the Nix store.
      '';
    };

  # The `nats` options both daemons have; they map onto the `[nats]` table.
  natsOptions =
    { example }:
    {
      url = mkOption {
        type = types.str;
        inherit example;
        description = "NATS server URL; several may be given separated by commas.";
      };
      credentialsFile = secretFileOption "nats.nk" "NATS credentials: a .creds file or an nkey seed file";
      tls = {
        required = mkOption {
          type = types.bool;
          default = false;
          description = "Require TLS even when the server does not ask for it.";
        };
        # Not secret, but handed over like the key: the unit sees one
        # directory of files, and the build-time check can stand in for it.
        caFile = secretFileOption "nats-ca.pem" "CA bundle that verifies the NATS server";
        certFile = secretFileOption "nats-client.crt" "Client certificate for mutual TLS (needs keyFile)";
        keyFile = secretFileOption "nats-client.key" "Client key for mutual TLS (needs certFile)";
      };
    };

  # Secrets of one unit: credential name -> { option, path }, the null ones dropped.
  presentSecrets = lib.filterAttrs (_: secret: secret.path != null);

  # The secrets of one daemon's unit: its NATS files, and `files`
  # (credential name -> the option under `prefix` that names the file), the
  # unset ones dropped. `cfg` is the module's config at `prefix`.
  unitSecrets =
    {
      prefix,
      cfg,
      files,
    }:
    presentSecrets (
      natsSecrets prefix cfg.nats
      // lib.mapAttrs (_: option: {
        option = "${prefix}.${option}";
        path = cfg.${option};
      }) files
    );

  loadCredential = secrets: lib.mapAttrsToList (name: secret: "${name}:${secret.path}") secrets;

  secretAssertions =
    secrets:
    lib.mapAttrsToList (_: secret: {
      assertion = !(lib.hasPrefix "/nix/store/" secret.path);
      message = "${secret.option} = \"${secret.path}\" is in the Nix store, which every local user can read. Keep the secret outside it (for example under /var/lib/secrets) and point the option there.";
    }) secrets;

  # How a config names a secret file. Inside the unit: the LoadCredential
  # copy. For an operator's CLI run as root: the file itself.
  unitSecretPath = unit: credential: _hostPath: "${credentialDir unit}/${credential}";
  hostSecretPath = _credential: hostPath: hostPath;

  # The path of an optional secret file `path` (null when unset), written by
  # `secretPath`, one of the two functions above.
  optionalSecretPath =
    secretPath: credential: path:
    if path == null then null else secretPath credential path;

  # Drop unset (null) entries: TOML has no null.
  withoutNulls = lib.filterAttrs (_: v: v != null);

  # The `[nats]` table; `secretPath` is one of the two functions above.
  natsSettings =
    { nats, secretPath }:
    let
      secret = optionalSecretPath secretPath;
      tls = withoutNulls {
        required = if nats.tls.required then true else null;
        ca_file = secret "nats-ca.pem" nats.tls.caFile;
        cert_file = secret "nats-tls.crt" nats.tls.certFile;
        key_file = secret "nats-tls.key" nats.tls.keyFile;
      };
    in
    withoutNulls {
      inherit (nats) url;
      credentials_file = secret "nats.creds" nats.credentialsFile;
      tls = if tls == { } then null else tls;
    };

  natsSecrets = optionPrefix: nats: {
    "nats.creds" = {
      option = "${optionPrefix}.nats.credentialsFile";
      path = nats.credentialsFile;
    };
    "nats-ca.pem" = {
      option = "${optionPrefix}.nats.tls.caFile";
      path = nats.tls.caFile;
    };
    "nats-tls.crt" = {
      option = "${optionPrefix}.nats.tls.certFile";
      path = nats.tls.certFile;
    };
    "nats-tls.key" = {
      option = "${optionPrefix}.nats.tls.keyFile";
      path = nats.tls.keyFile;
    };
  };

  natsAssertions = optionPrefix: nats: [
    {
      assertion = (nats.tls.certFile == null) == (nats.tls.keyFile == null);
      message = "${optionPrefix}.nats.tls.certFile and ${optionPrefix}.nats.tls.keyFile go together: set both for mutual TLS, or neither.";
    }
  ];

  # The generated config, checked by the daemon's own `--check-config` at
  # build time, so a bad config fails `nixos-rebuild` instead of the unit.
  # The config points at /run/credentials/<unit>/, which the build sandbox
  # does not have: the check reads a copy that points at empty stand-ins.
  # (The daemons' check looks at whether those files exist, not into them;
  # it must not require what exists only at run time: the state directory,
  # the docker socket, a generated xkey seed.)
  # `cfg` is the module's config (its `package` runs the check); `secrets`
  # its unitSecrets, whose names the stand-ins take. With `cfg.checkConfig`
  # false, the config as it is.
  checkedConfig =
    {
      pkgs,
      cfg,
      secrets,
      name,
      configFile,
      checkCommand,
      unit,
    }:
    if !cfg.checkConfig then
      configFile
    else
      pkgs.runCommand name { nativeBuildInputs = [ cfg.package ]; } ''
        mkdir credentials
        ${lib.concatMapStrings (n: "touch credentials/${lib.escapeShellArg n}\n") (lib.attrNames secrets)}
        sed "s|${credentialDir unit}/|$PWD/credentials/|g" ${configFile} > check.toml
        ${checkCommand} check.toml
        cp ${configFile} "$out"
      '';

  # A daemon's `package` option: its crate, built by ./package.nix.
  packageOption =
    pkgs: crate:
    mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { inherit crate; };
      defaultText = lib.literalExpression ''pkgs.callPackage ./nix/package.nix { crate = "${crate}"; }'';
      description = "The package that provides the `${crate}` binary.";
    };

  # The options both daemons' modules have for their generated config:
  # `checkConfig`, the read-only `configFile` the unit runs with, and the
  # free-form TOML `settings`.
  configOptions =
    {
      toml,
      checkCommand,
      checkedConfigFile,
      unitName,
      settingsExample,
      settingsDescription,
    }:
    {
      checkConfig = mkOption {
        type = types.bool;
        default = true;
        description = "Run `${checkCommand}` on the generated config at build time.";
      };

      configFile = mkOption {
        type = types.package;
        readOnly = true;
        default = checkedConfigFile;
        defaultText = lib.literalMD "the generated config, checked when `checkConfig` is set";
        description = "The config file the ${unitName} unit runs with.";
      };

      settings = mkOption {
        type = types.submodule { freeformType = toml.type; };
        default = { };
        example = settingsExample;
        description = settingsDescription;
      };
    };

  # Unit hardening both daemons get. Whatever a daemon needs beyond this
  # (the hive's docker group, state paths) is added by its module.
  hardening = {
    CapabilityBoundingSet = "";
    AmbientCapabilities = "";
    LockPersonality = true;
    MemoryDenyWriteExecute = true;
    NoNewPrivileges = true;
    PrivateDevices = true;
    PrivateTmp = true;
    ProcSubset = "pid";
    ProtectClock = true;
    ProtectControlGroups = true;
    ProtectHome = true;
    ProtectHostname = true;
    ProtectKernelLogs = true;
    ProtectKernelModules = true;
    ProtectKernelTunables = true;
    ProtectProc = "invisible";
    ProtectSystem = "strict";
    RestrictAddressFamilies = [
      "AF_UNIX"
      "AF_INET"
      "AF_INET6"
    ];
    RestrictNamespaces = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    SystemCallArchitectures = "native";
    SystemCallFilter = [
      "@system-service"
      "~@privileged"
      "~@resources"
    ];
    UMask = "0077";
  };
}
