package lakehouse.validation;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * A record's rules (a {@code RecordSpec} of {@code lakehouse.specs}, handed over as JSON by
 * {@code jobs.validation}) checked in one pass of a streaming JSON parser: the typed value of
 * each field and the rules the record breaks.
 *
 * <p>Called by Spark as a function of (the record's UTF-8 bytes, whether its bytes were invalid
 * UTF-8) and returning a struct: one column per field (its validated value, all null unless the
 * record is valid), {@code reasons} (every broken rule in field order, or the one problem of the
 * whole record), {@code reason} (the first), {@code is_valid} and {@code raw_event_id} (the event
 * id as far as it can be read, for the quarantine).
 *
 * <p>The parser sees each token's JSON type, so {@code "12"}, {@code 12}, {@code 12.5} and
 * {@code {"a":1}} are told apart, as the contract needs. Numbers follow the rules Spark's VARIANT
 * gives the same text (an integer beyond 64 bits is a decimal up to 38 digits and a double beyond;
 * a fraction is a decimal unless it has an exponent or more than 38 digits, then a double), and
 * timestamps are cast by Spark's own string-to-timestamp conversion, so the verdicts are those of
 * a Spark SQL cast of the same value.
 */
public final class RecordValidator implements UDF2<byte[], Boolean, Row> {
  private static final long serialVersionUID = 1L;

  // Jackson's defaults are strict JSON (no comments, NaN, single quotes or leading zeros), as
  // Spark's own JSON parsers use it. Duplicate keys, at any depth, make a record invalid.
  private static final JsonFactory STRICT =
      JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();
  private static final JsonFactory LENIENT = new JsonFactory();

  // \z is the very end (a "$" would also match before a final newline).
  private static final Pattern TS_WITH_ZONE =
      Pattern.compile(
          "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})\\z");
  private static final Pattern TS_WITHOUT_ZONE =
      Pattern.compile("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?\\z");
  private static final Pattern DECIMAL_NOTATION =
      Pattern.compile("^[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)\\z");
  private static final Pattern DIGITS = Pattern.compile("^[0-9]+\\z");
  // Years 1..9999 in UTC: 0001-01-01T00:00:00Z inclusive to 10000-01-01T00:00:00Z exclusive.
  private static final long FIRST_MICROS = -62_135_596_800_000_000L;
  private static final long END_MICROS = 253_402_300_800_000_000L;
  // Decimals are first read as decimal(38,10), wide enough for any value kept, then rounded
  // half up to the field's scale.
  private static final int WIDE_PRECISION = 38;
  private static final int WIDE_SCALE = 10;

  /** What a field's token was; a number carries what Spark's VARIANT would hold for it. */
  private enum Token {
    ABSENT,
    NULL,
    STRING,
    LONG, // an integer that fits 64 bits
    BIG_INTEGER, // an integer of up to 38 digits beyond 64 bits (a VARIANT decimal)
    DOUBLE, // a number VARIANT keeps as a double: an exponent, or more than 38 digits
    DECIMAL, // a number with a fraction, up to 38 digits, no exponent
    BOOLEAN,
    CONTAINER
  }

  private enum Kind {
    ID,
    ENUM,
    TIMESTAMP,
    TEXT,
    STRING,
    DECIMAL,
    COUNT,
    INTEGER
  }

  /** A condition on another field's validated value ({@code optional_when}, {@code ignored_when}). */
  private static final class When implements Serializable {
    private static final long serialVersionUID = 1L;
    final int field;
    final Set<String> values;

    When(int field, Set<String> values) {
      this.field = field;
      this.values = values;
    }

    boolean holds(Object[] validated) {
      Object value = validated[field];
      return value != null && values.contains(value.toString());
    }
  }

  private static final class Field implements Serializable {
    private static final long serialVersionUID = 1L;
    final String name;
    final Kind kind;
    final boolean required;
    final Set<String> allowed;
    final Pattern pattern;
    final BigDecimal minimum;
    final BigDecimal maximum;
    final int precision;
    final int scale;
    final DataType type;
    When optionalWhen;
    When ignoredWhen;

    Field(JsonNode spec) {
      name = spec.get("name").asText();
      kind = Kind.valueOf(spec.get("kind").asText().toUpperCase());
      required = spec.get("required").asBoolean();
      allowed = new HashSet<>();
      spec.get("allowed").forEach(value -> allowed.add(value.asText()));
      JsonNode regex = spec.get("pattern");
      pattern = regex.isNull() ? null : Pattern.compile("^(?:" + regex.asText() + ")\\z");
      minimum = decimalOrNull(spec.get("minimum"));
      maximum = decimalOrNull(spec.get("maximum"));
      precision = spec.get("precision").asInt();
      scale = spec.get("scale").asInt();
      type = DataType.fromDDL(spec.get("sql_type").asText());
    }

    private static BigDecimal decimalOrNull(JsonNode node) {
      return node.isNull() ? null : new BigDecimal(node.asText());
    }
  }

  /** The tokens of one record's declared fields. */
  private static final class Tokens {
    final Token[] kinds;
    final String[] texts;
    final long[] longs;

    Tokens(int fields) {
      kinds = new Token[fields];
      texts = new String[fields];
      longs = new long[fields];
      java.util.Arrays.fill(kinds, Token.ABSENT);
    }
  }

  private final Field[] fields;
  private final Map<String, Integer> byName;
  private final int eventId;

  public RecordValidator(String specJson) throws IOException {
    JsonNode spec = new ObjectMapper().readTree(specJson);
    List<Field> declared = new ArrayList<>();
    spec.get("fields").forEach(node -> declared.add(new Field(node)));
    fields = declared.toArray(new Field[0]);
    byName = new HashMap<>();
    for (int i = 0; i < fields.length; i++) {
      byName.put(fields[i].name, i);
    }
    int i = 0;
    for (JsonNode node : spec.get("fields")) {
      fields[i].optionalWhen = when(node.get("optional_when"));
      fields[i].ignoredWhen = when(node.get("ignored_when"));
      i++;
    }
    eventId = byName.getOrDefault(spec.get("event_id").asText(), -1);
  }

  private When when(JsonNode condition) {
    if (condition.isNull()) {
      return null;
    }
    Set<String> values = new HashSet<>();
    condition.get(1).forEach(value -> values.add(value.asText()));
    return new When(byName.get(condition.get(0).asText()), values);
  }

  /** Registers a validator for {@code specJson} as the session function {@code name}. */
  public static void register(SparkSession spark, String name, String specJson)
      throws IOException {
    RecordValidator validator = new RecordValidator(specJson);
    spark.udf().register(name, validator, validator.resultType());
  }

  /** The struct {@link #call} returns: the fields' values, then the verdict. */
  public DataType resultType() {
    List<StructField> columns = new ArrayList<>();
    for (Field field : fields) {
      columns.add(DataTypes.createStructField(field.name, field.type, true));
    }
    columns.add(
        DataTypes.createStructField(
            "reasons", DataTypes.createArrayType(DataTypes.StringType, false), false));
    columns.add(DataTypes.createStructField("reason", DataTypes.StringType, true));
    columns.add(DataTypes.createStructField("is_valid", DataTypes.BooleanType, false));
    columns.add(DataTypes.createStructField("raw_event_id", DataTypes.StringType, true));
    return DataTypes.createStructType(columns);
  }

  @Override
  public Row call(byte[] raw, Boolean invalidUtf8) {
    if (raw == null) {
      return verdict(new Object[fields.length], List.of("not_json"), null); // a Kafka tombstone
    }
    Tokens tokens = new Tokens(fields.length);
    String problem;
    try (JsonParser parser = STRICT.createParser(raw)) {
      problem = read(raw, parser, tokens);
    } catch (IOException e) {
      // Not one JSON value, or one with duplicate keys: read again with duplicates allowed.
      problem = isOneValue(raw) ? "duplicate_key" : "not_json";
      tokens = null;
    }
    String rawEventId = tokens == null || eventId < 0 ? null : eventIdText(tokens);
    if (Boolean.TRUE.equals(invalidUtf8)) {
      problem = "invalid_utf8";
    }
    if (problem != null) {
      return verdict(new Object[fields.length], List.of(problem), rawEventId);
    }
    return check(tokens, rawEventId);
  }

  /** Reads one JSON value; returns the problem of the whole record, or null for an object. */
  private String read(byte[] raw, JsonParser parser, Tokens tokens) throws IOException {
    if (hasByteOrderMark(raw)) {
      return "not_json"; // JSON text has none (RFC 8259), though a byte parser would skip it
    }
    JsonToken token = parser.nextToken();
    if (token == null) {
      return "not_json"; // nothing but whitespace
    }
    if (token != JsonToken.START_OBJECT) {
      parser.skipChildren();
      return parser.nextToken() == null ? "not_object" : "not_json";
    }
    while (parser.nextToken() == JsonToken.FIELD_NAME) {
      Integer index = byName.get(parser.currentName());
      JsonToken value = parser.nextToken();
      if (index == null) {
        parser.skipChildren(); // still read, so that its syntax and keys are checked
      } else {
        capture(parser, value, index, tokens);
      }
    }
    return parser.nextToken() == null ? null : "not_json";
  }

  private static void capture(JsonParser parser, JsonToken value, int index, Tokens tokens)
      throws IOException {
    switch (value) {
      case VALUE_STRING:
        tokens.kinds[index] = Token.STRING;
        tokens.texts[index] = parser.getText();
        break;
      case VALUE_NUMBER_INT:
        JsonParser.NumberType type = parser.getNumberType();
        if (type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG) {
          tokens.kinds[index] = Token.LONG;
          tokens.longs[index] = parser.getLongValue();
        } else {
          String text = parser.getText();
          int digits = text.length() - (text.startsWith("-") ? 1 : 0);
          tokens.kinds[index] = digits <= WIDE_PRECISION ? Token.BIG_INTEGER : Token.DOUBLE;
          tokens.texts[index] = text;
        }
        break;
      case VALUE_NUMBER_FLOAT:
        String text = parser.getText();
        tokens.kinds[index] = isDecimal(text) ? Token.DECIMAL : Token.DOUBLE;
        tokens.texts[index] = text;
        break;
      case VALUE_TRUE:
      case VALUE_FALSE:
        tokens.kinds[index] = Token.BOOLEAN;
        tokens.texts[index] = parser.getText();
        break;
      case VALUE_NULL:
        tokens.kinds[index] = Token.NULL;
        break;
      default: // an object or an array
        tokens.kinds[index] = Token.CONTAINER;
        parser.skipChildren();
    }
  }

  /** A fraction VARIANT keeps as a decimal: no exponent, at most 38 digits and places. */
  private static boolean isDecimal(String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c != '-' && c != '.' && (c < '0' || c > '9')) {
        return false;
      }
    }
    BigDecimal value = new BigDecimal(text);
    return value.precision() <= WIDE_PRECISION && value.scale() <= WIDE_PRECISION;
  }

  private static boolean hasByteOrderMark(byte[] raw) {
    return raw.length >= 3 && raw[0] == (byte) 0xEF && raw[1] == (byte) 0xBB && raw[2] == (byte) 0xBF;
  }

  /** Whether {@code raw} is exactly one JSON value once duplicate keys are allowed. */
  private static boolean isOneValue(byte[] raw) {
    try (JsonParser parser = LENIENT.createParser(raw)) {
      if (parser.nextToken() == null) {
        return false;
      }
      parser.skipChildren();
      return parser.nextToken() == null;
    } catch (IOException e) {
      return false;
    }
  }

  private String eventIdText(Tokens tokens) {
    switch (tokens.kinds[eventId]) {
      case LONG:
        return Long.toString(tokens.longs[eventId]);
      case BIG_INTEGER:
        return new BigInteger(tokens.texts[eventId]).toString();
      default: // a string, or the JSON text of another scalar; null for null and containers
        return tokens.texts[eventId];
    }
  }

  private Row check(Tokens tokens, String rawEventId) {
    int n = fields.length;
    Object[] values = new Object[n];
    String[] broken = new String[n];
    for (int i = 0; i < n; i++) {
      Token token = tokens.kinds[i];
      if (token != Token.ABSENT && token != Token.NULL) {
        broken[i] = checkField(fields[i], token, tokens.texts[i], tokens.longs[i], values, i);
      }
    }
    List<String> reasons = new ArrayList<>(2);
    for (int i = 0; i < n; i++) {
      Field field = fields[i];
      if (field.ignoredWhen != null && field.ignoredWhen.holds(values)) {
        continue;
      }
      Token token = tokens.kinds[i];
      if (token != Token.ABSENT && token != Token.NULL) {
        if (broken[i] != null) {
          reasons.add(broken[i]);
        }
      } else if (field.optionalWhen != null
          ? !field.optionalWhen.holds(values)
          : field.required) {
        reasons.add("missing:" + field.name);
      }
    }
    if (!reasons.isEmpty()) {
      return verdict(new Object[n], reasons, rawEventId);
    }
    Object[] kept = values.clone();
    for (int i = 0; i < n; i++) {
      if (fields[i].ignoredWhen != null && fields[i].ignoredWhen.holds(values)) {
        kept[i] = null;
      }
    }
    return verdict(kept, reasons, rawEventId);
  }

  /** Checks a present field: sets its value in {@code values}, returns the rule it breaks. */
  private static String checkField(
      Field field, Token token, String text, long number, Object[] values, int i) {
    boolean isString = token == Token.STRING;
    switch (field.kind) {
      case ID:
      case TEXT:
      case STRING:
        {
          boolean ok =
              isString
                  && (field.kind == Kind.STRING || !text.isEmpty())
                  && (field.pattern == null || field.pattern.matcher(text).matches());
          if (ok) {
            values[i] = text;
            return null;
          }
          if (field.kind == Kind.ID && token == Token.LONG) {
            values[i] = Long.toString(number);
            return null;
          }
          if (field.kind == Kind.ID && token == Token.BIG_INTEGER) {
            values[i] = new BigInteger(text).toString();
            return null;
          }
          if (isString && field.kind != Kind.STRING && text.isEmpty()) {
            return rule("empty", field);
          }
          return rule(isString ? "bad_format" : "wrong_type", field);
        }
      case ENUM:
        if (isString && field.allowed.contains(text)) {
          values[i] = text;
          return null;
        }
        return rule(isString ? "not_allowed" : "wrong_type", field);
      case TIMESTAMP:
        {
          if (!isString) {
            return rule("wrong_type", field);
          }
          if (TS_WITH_ZONE.matcher(text).matches()) {
            Long micros = timestampMicros(text);
            if (micros != null && micros >= FIRST_MICROS && micros < END_MICROS) {
              values[i] = instant(micros);
              return null;
            }
            return rule("impossible_date", field);
          }
          return rule(TS_WITHOUT_ZONE.matcher(text).matches() ? "no_zone" : "bad_format", field);
        }
      case DECIMAL:
        {
          BigDecimal wide;
          switch (token) {
            case LONG:
              wide = BigDecimal.valueOf(number).setScale(WIDE_SCALE);
              break;
            case BIG_INTEGER:
            case DECIMAL:
              wide = wide(new BigDecimal(text));
              break;
            case DOUBLE:
              wide = wide(Double.parseDouble(text));
              break;
            case STRING:
              if (!DECIMAL_NOTATION.matcher(text).matches()) {
                return rule("wrong_type", field);
              }
              wide = wide(new BigDecimal(text));
              break;
            default:
              return rule("wrong_type", field);
          }
          if (wide == null
              || (field.minimum != null && wide.compareTo(field.minimum) < 0)
              || (field.maximum != null && wide.compareTo(field.maximum) > 0)) {
            return rule("out_of_range", field);
          }
          BigDecimal value = wide.setScale(field.scale, RoundingMode.HALF_UP);
          if (value.precision() > field.precision) {
            return rule("out_of_range", field);
          }
          values[i] = value;
          return null;
        }
      case COUNT:
      case INTEGER:
        {
          Long value;
          if (token == Token.LONG) {
            value = number;
          } else if (token == Token.BIG_INTEGER) {
            value = null; // an integer, beyond 64 bits
          } else if (field.kind == Kind.COUNT && isString && DIGITS.matcher(text).matches()) {
            value = parseLongOrNull(text);
          } else {
            return rule("wrong_type", field);
          }
          if (value == null || (field.kind == Kind.COUNT && value < 0)) {
            return rule("out_of_range", field);
          }
          values[i] = value;
          return null;
        }
      default:
        throw new IllegalStateException("unknown kind " + field.kind);
    }
  }

  private static String rule(String rule, Field field) {
    return rule + ":" + field.name;
  }

  /** {@code value} as decimal(38,10), rounded half up; null when it does not fit. */
  private static BigDecimal wide(BigDecimal value) {
    BigDecimal wide = value.setScale(WIDE_SCALE, RoundingMode.HALF_UP);
    return wide.precision() > WIDE_PRECISION ? null : wide;
  }

  /** A double as Spark casts it to a decimal: through its shortest decimal text. */
  private static BigDecimal wide(double value) {
    if (Double.isNaN(value) || Double.isInfinite(value)) {
      return null;
    }
    return wide(new BigDecimal(Double.toString(value)));
  }

  private static Long parseLongOrNull(String digits) {
    try {
      return Long.parseLong(digits);
    } catch (NumberFormatException e) {
      return null;
    }
  }

  /** Spark's cast of a string to a timestamp (UTC for a value without a zone), in micros. */
  private static Long timestampMicros(String text) {
    Option<Object> micros =
        DateTimeUtils.stringToTimestamp(UTF8String.fromString(text), ZoneOffset.UTC);
    return micros.isDefined() ? (Long) micros.get() : null;
  }

  private static Instant instant(long micros) {
    return Instant.ofEpochSecond(
        Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1_000L);
  }

  private Row verdict(Object[] values, List<String> reasons, String rawEventId) {
    Object[] row = new Object[values.length + 4];
    System.arraycopy(values, 0, row, 0, values.length);
    row[values.length] = reasons.toArray(new String[0]);
    row[values.length + 1] = reasons.isEmpty() ? null : reasons.get(0);
    row[values.length + 2] = reasons.isEmpty();
    row[values.length + 3] = rawEventId;
    return RowFactory.create(row);
  }
}
